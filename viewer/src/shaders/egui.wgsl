// linetrace's replacement for bevy_egui's egui shader (installed by
// `viewer::egui_shader`): the same bindings, vertex layout and colour
// rules, with the sRGB curves computed without `pow`.
//
// egui multiplies colours in gamma space: the texture's linear sample goes
// to gamma, is multiplied by the vertex colour, and comes back to linear
// for the sRGB target. With `pow` for both curves this was four tenths of
// a 1920x1080 frame on lavapipe (a CPU renderer, where every fragment's
// arithmetic is paid for). The curves below stay within 0.25/255 of the
// exact ones (tested in egui_shader.rs): pictures and solid fills come
// out exactly as before, anti-aliased text within one level.

struct Transform {
    scale: vec2<f32>,
    translation: vec2<f32>,
}

struct VertexInput {
    @location(0) position: vec2<f32>,
    @location(1) uv: vec2<f32>,
    @location(2) color: vec4<f32>,
}

struct VertexOutput {
    @builtin(position) position: vec4<f32>,
    @location(0) color: vec4<f32>,
    @location(1) uv: vec2<f32>,
}

@group(0) @binding(0) var<uniform> transform: Transform;

#ifdef BINDLESS
@group(1) @binding(0) var image_texture: binding_array<texture_2d<f32>>;
@group(1) @binding(1) var image_sampler: binding_array<sampler>;
struct BindlessOffset {
    offset: u32,
};
var<immediate> offset: BindlessOffset;
#else
@group(1) @binding(0) var image_texture: texture_2d<f32>;
@group(1) @binding(1) var image_sampler: sampler;
#endif

// ((s + 0.055) / 1.055)^2.4 above the linear segment, as a polynomial in s
// (highest power first), fitted on [0.04045, 1].
const LINEAR_FROM_GAMMA = array<f32, 6>(0.05445988, -0.22566287, 0.59495913, 0.54650238, 0.0286776, 0.00109637);
// 1.055 x^(1/2.4) - 0.055 above the linear segment, as a weighted sum of
// x^(1/2), x^(1/4), x^(1/8) and x.
const GAMMA_FROM_LINEAR = vec4<f32>(0.662002687, 0.684122060, -0.323583601, -0.0225411470);

fn linear_from_gamma_rgb(s: vec3<f32>) -> vec3<f32> {
    let c = LINEAR_FROM_GAMMA;
    let curve = ((((c[0] * s + c[1]) * s + c[2]) * s + c[3]) * s + c[4]) * s + c[5];
    return select(curve, s / 12.92, s < vec3<f32>(0.04045));
}

fn gamma_from_linear_rgb(x: vec3<f32>) -> vec3<f32> {
    let r2 = sqrt(x);
    let r4 = sqrt(r2);
    let r8 = sqrt(r4);
    let g = GAMMA_FROM_LINEAR;
    let curve = g.x * r2 + g.y * r4 + g.z * r8 + g.w * x;
    return select(curve, x * 12.92, x < vec3<f32>(0.0031308));
}

@vertex
fn vs_main(in: VertexInput) -> VertexOutput {
    let position = in.position * transform.scale + transform.translation;
    // Colours are interpolated in gamma space, as egui does.
    return VertexOutput(vec4<f32>(position, 0.0, 1.0), in.color, in.uv);
}

@fragment
fn fs_main(in: VertexOutput) -> @location(0) vec4<f32> {
#ifdef BINDLESS
    let texel = textureSample(image_texture[offset.offset], image_sampler[offset.offset], in.uv);
#else
    let texel = textureSample(image_texture, image_sampler, in.uv);
#endif
    let gamma = vec4<f32>(gamma_from_linear_rgb(texel.rgb), texel.a) * in.color;
    return vec4<f32>(linear_from_gamma_rgb(gamma.rgb), gamma.a);
}
