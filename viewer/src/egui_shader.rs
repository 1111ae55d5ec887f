//! A cheaper egui shader: bevy_egui's, with the sRGB curves computed
//! without `pow` (see `shaders/egui.wgsl` for why and how close).
//!
//! bevy_egui loads its shader under a public handle
//! ([`bevy_egui::render::EGUI_SHADER_HANDLE`]); putting another shader
//! asset under that handle, after `EguiPlugin` has built, makes its
//! pipeline compile ours. The bindings and vertex layout must stay
//! bevy_egui's: a bevy_egui upgrade that changes them shows up as a
//! failed pipeline (no picture) in the screenshot tests.

use bevy::prelude::*;
use bevy::shader::Shader;

/// The replacement shader's source.
const SOURCE: &str = include_str!("shaders/egui.wgsl");

/// Puts the cheaper shader in place of bevy_egui's. Add it after
/// `EguiPlugin`.
pub struct EguiShaderPlugin;

impl Plugin for EguiShaderPlugin {
    fn build(&self, app: &mut App) {
        let shader = Shader::from_wgsl(SOURCE, "linetrace/egui.wgsl");
        let Some(mut shaders) = app.world_mut().get_resource_mut::<Assets<Shader>>() else {
            // No renderer (a test app): nothing to replace.
            return;
        };
        if let Err(e) = shaders.insert(bevy_egui::render::EGUI_SHADER_HANDLE.id(), shader) {
            warn!("keeping bevy_egui's shader: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SOURCE;

    /// The numbers inside `NAME = TYPE(...)` in the shader.
    fn constants(name: &str) -> Vec<f64> {
        let start = SOURCE.find(&format!("const {name} =")).expect("the constant is in the shader");
        let open = start + SOURCE[start..].find('(').expect("an opening parenthesis") + 1;
        let close = open + SOURCE[open..].find(')').expect("a closing parenthesis");
        SOURCE[open..close].split(',').map(|n| n.trim().parse().expect("a number")).collect()
    }

    fn exact_linear(s: f64) -> f64 {
        if s < 0.04045 { s / 12.92 } else { ((s + 0.055) / 1.055).powf(2.4) }
    }

    fn exact_gamma(x: f64) -> f64 {
        if x < 0.0031308 { x * 12.92 } else { 1.055 * x.powf(1.0 / 2.4) - 0.055 }
    }

    /// The shader's curves, from its constants, in f32 as the GPU runs them.
    fn shader_linear(s: f32, c: &[f64]) -> f32 {
        if s < 0.04045 {
            return s / 12.92;
        }
        c.iter().fold(0.0f32, |acc, &k| acc * s + k as f32)
    }

    fn shader_gamma(x: f32, g: &[f64]) -> f32 {
        if x < 0.0031308 {
            return x * 12.92;
        }
        let (r2, r4) = (x.sqrt(), x.sqrt().sqrt());
        let r8 = r4.sqrt();
        g[0] as f32 * r2 + g[1] as f32 * r4 + g[2] as f32 * r8 + g[3] as f32 * x
    }

    #[test]
    fn the_curves_stay_within_a_quarter_level() {
        let (lin, gam) = (constants("LINEAR_FROM_GAMMA"), constants("GAMMA_FROM_LINEAR"));
        assert_eq!((lin.len(), gam.len()), (6, 4));
        for i in 0..=10_000 {
            let v = f64::from(i) / 10_000.0;
            // Errors measured where they show: in 8-bit sRGB levels.
            let linear_error = (exact_gamma(f64::from(shader_linear(v as f32, &lin)).max(0.0)) - v).abs() * 255.0;
            assert!(linear_error < 0.25, "linear_from_gamma({v}) is {linear_error} levels off");
            let gamma_error = (f64::from(shader_gamma(v as f32, &gam)) - exact_gamma(v)).abs() * 255.0;
            assert!(gamma_error < 0.25, "gamma_from_linear({v}) is {gamma_error} levels off");
        }
    }

    #[test]
    fn pictures_and_fills_keep_every_level() {
        let (lin, gam) = (constants("LINEAR_FROM_GAMMA"), constants("GAMMA_FROM_LINEAR"));
        for level in 0..=255u32 {
            let s = f64::from(level) / 255.0;
            // A picture: its texel (stored sRGB, sampled linear) times white.
            let texel = exact_linear(s) as f32;
            let picture = shader_linear(shader_gamma(texel, &gam), &lin);
            // A fill: the white texel times the colour.
            let fill = shader_linear(shader_gamma(1.0, &gam) * s as f32, &lin);
            for (what, out) in [("picture", picture), ("fill", fill)] {
                let back = (exact_gamma(f64::from(out).max(0.0)) * 255.0).round() as u32;
                assert_eq!(back, level, "a {what} of level {level} comes out as {back}");
            }
        }
    }
}
