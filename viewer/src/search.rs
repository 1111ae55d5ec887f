//! Finding frames by name (Ctrl+F): the frames whose function's name
//! contains the text, in column order; Enter and Shift+Enter step through
//! them, fitting the view to each.

use bevy::prelude::*;
use decoder::calltree::Frame;

use crate::session::Session;
use crate::view::ViewCommand;
use crate::work::Work;

/// What is searched for, and where in the matches the user is.
#[derive(Clone, Debug, Default, Resource)]
pub struct SearchState {
    /// The search box is open.
    pub open: bool,
    /// The text.
    pub text: String,
    /// Index of the current match.
    pub current: Option<usize>,
    /// The box wants the keyboard.
    pub focus: bool,
}

/// Something asked of the search.
#[derive(Clone, Debug, PartialEq, Message)]
pub enum SearchCommand {
    /// Open the box (and focus it).
    Open,
    /// Close it.
    Close,
    /// Search for this text (starting over).
    Set(String),
    /// Go to the next (`1`) or previous (`-1`) match.
    Step(isize),
}

/// The stored frames whose function is in `entries`, in column order.
pub fn matching_frames<'a>(frames: &'a [Frame], entries: &std::collections::HashSet<u64>) -> Vec<&'a Frame> {
    frames.iter().filter(|f| entries.contains(&f.function)).collect()
}

/// The match after `current` going `step` (wrapping), among `count`.
pub fn step_match(current: Option<usize>, count: usize, step: isize) -> Option<usize> {
    if count == 0 {
        return None;
    }
    let n = count as isize;
    Some(match current {
        Some(i) => (i as isize + step).rem_euclid(n),
        None if step >= 0 => 0,
        None => n - 1,
    } as usize)
}

/// Applies this frame's search commands.
pub fn apply_search_commands(
    mut commands: MessageReader<SearchCommand>,
    mut search: ResMut<SearchState>,
    session: Res<Session>,
    work: Res<Work>,
    mut view: MessageWriter<ViewCommand>,
) {
    for command in commands.read() {
        match command {
            SearchCommand::Open => {
                search.open = true;
                search.focus = true;
            }
            SearchCommand::Close => search.open = false,
            SearchCommand::Set(text) => {
                search.text = text.clone();
                search.current = None;
            }
            SearchCommand::Step(step) => {
                let Some(loaded) = &session.loaded else { continue };
                if search.text.is_empty() {
                    continue;
                }
                let entries = work.names.matching(&search.text);
                let matches = matching_frames(&loaded.model.call_tree.frames, &entries);
                search.current = step_match(search.current, matches.len(), *step);
                if let Some(f) = search.current.map(|i| matches[i]) {
                    let to = f.end_column.max(f.first_column + 1);
                    view.write(ViewCommand::Fit { from: f.first_column as f64, to: to as f64 });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_wrap_both_ways() {
        assert_eq!(step_match(None, 3, 1), Some(0));
        assert_eq!(step_match(None, 3, -1), Some(2));
        assert_eq!(step_match(Some(2), 3, 1), Some(0));
        assert_eq!(step_match(Some(0), 3, -1), Some(2));
        assert_eq!(step_match(Some(0), 0, 1), None);
    }
}
