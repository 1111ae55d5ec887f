//! The `linetrace` command: parses the command line and hands each
//! subcommand to its module.

mod at;
mod cli;
mod diff;
mod dump;
mod export;
mod heap;
mod output;
mod progress;
mod record;
mod render;
mod report;
mod view;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// Whether writing failed because the reader of our output went away
/// (directly, under a context, or inside a JSON writer's error).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let kind = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => Some(io.kind()),
            None => cause.downcast_ref::<serde_json::Error>().and_then(serde_json::Error::io_error_kind),
        };
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    if let Some(missing) = missing_cpu_feature() {
        eprintln!(
            "linetrace: error: this CPU lacks {missing}: linetrace is built for x86-64-v2 CPUs \
             (see .cargo/config.toml)"
        );
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(args) => record::record(args),
        Command::Report(args) => report::report(args).map(|()| ExitCode::SUCCESS),
        Command::Render(args) => render::render(args).map(|()| ExitCode::SUCCESS),
        Command::At(args) => at::at(args).map(|()| ExitCode::SUCCESS),
        Command::View(args) => view::view(args).map(|()| ExitCode::SUCCESS),
        Command::Demo(args) => view::demo(args),
        Command::Dump(args) => dump::dump(args).map(|()| ExitCode::SUCCESS),
        Command::Diff(args) => diff::diff(args),
        Command::Export(args) => export::export(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        // `linetrace dump FILE | head` closes the pipe early: not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linetrace: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The first feature of the x86-64-v2 level the build targets that this CPU
/// lacks (the check runs before any code compiled for it).
fn missing_cpu_feature() -> Option<&'static str> {
    let has = [
        ("popcnt", std::arch::is_x86_feature_detected!("popcnt")),
        ("sse4.2", std::arch::is_x86_feature_detected!("sse4.2")),
        ("sse4.1", std::arch::is_x86_feature_detected!("sse4.1")),
        ("ssse3", std::arch::is_x86_feature_detected!("ssse3")),
        ("cmpxchg16b", std::arch::is_x86_feature_detected!("cmpxchg16b")),
    ];
    has.into_iter().find(|&(_, present)| !present).map(|(name, _)| name)
}
