//! One radiograph on a canvas with window/level on the original 16-bit values, zoom (wheel or
//! +/-), pan (drag or arrow keys) and reset of all three (double-click or 0). It opens at the image's own
//! min..max, or at a window the caller gives (a DICOM file's Window Center/Width), and can
//! show the image inverted (DICOM MONOCHROME1, where low values are white).

use leptos::prelude::*;
use wasm_bindgen::{Clamped, JsCast};
use web_sys::{CanvasRenderingContext2d, ImageData, KeyboardEvent, PointerEvent, WheelEvent};

use super::engine::Engine;
use super::signals::Pixels;

fn draw(canvas: &web_sys::HtmlCanvasElement, px: &Pixels, window: f64, level: f64, invert: bool) {
    let (w, h) = (px.width, px.height);
    canvas.set_width(w);
    canvas.set_height(h);
    let Ok(Some(ctx)) = canvas.get_context("2d") else {
        return;
    };
    let Ok(ctx) = ctx.dyn_into::<CanvasRenderingContext2d>() else {
        return;
    };
    let lo = level - window / 2.0;
    let scale = 255.0 / window.max(1.0);
    let ch = px.channels as usize;
    let mut rgba = vec![255u8; (w * h * 4) as usize];
    for p in 0..(w * h) as usize {
        for c in 0..3 {
            let v = px.data[p * ch + if ch == 1 { 0 } else { c }] as f64;
            let g = ((v - lo) * scale).clamp(0.0, 255.0) as u8;
            rgba[p * 4 + c] = if invert { 255 - g } else { g };
        }
    }
    if let Ok(img) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&rgba), w, h) {
        let _ = ctx.put_image_data(&img, 0.0, 0.0);
    }
}

/// The viewer of one image path (pixels come from the worker on request).
///
/// `initial` is the window it opens at, as (level, width) in sample units
/// (default: the image's min..max); `invert` shows low values white. The figure carries the
/// initial window as `data-initial-window="level/width"` and `data-inverted`.
#[component]
pub fn XrayView(
    path: String,
    view_name: String,
    #[prop(optional_no_strip)] initial: Option<(f64, f64)>,
    #[prop(optional)] invert: bool,
) -> impl IntoView {
    let engine = expect_context::<Engine>();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let window = RwSignal::new(0.0f64);
    let level = RwSignal::new(0.0f64);
    let range = RwSignal::new((0.0f64, 65535.0f64));
    let zoom = RwSignal::new(1.0f64);
    let pan = RwSignal::new((0.0f64, 0.0f64));
    let drag = RwSignal::new(None::<(f64, f64)>);
    // The window it opened at (level, width), once the pixels are here.
    let opened_at = RwSignal::new(None::<(f64, f64)>);
    let key = path.clone();
    let pixels = Memo::new(move |_| {
        engine
            .images
            .with(|m| m.get(&key).map(|p| (p.width, p.height, p.bits)))
    });
    let p2 = path.clone();
    // Opening window: the caller's, else the image's own min..max.
    Effect::new(move |_| {
        if pixels.get().is_some() {
            engine.images.with_untracked(|m| {
                if let Some(p) = m.get(&p2) {
                    let full = if p.bits == 16 { 65535.0 } else { 255.0 };
                    range.set((0.0, full));
                    let (l, w) = initial.unwrap_or_else(|| {
                        let (mn, mx) = p
                            .data
                            .iter()
                            .fold((u16::MAX, 0u16), |(a, b), &v| (a.min(v), b.max(v)));
                        (
                            (mx as f64 + mn as f64) / 2.0,
                            (mx as f64 - mn as f64).max(1.0),
                        )
                    });
                    window.set(w.max(1.0));
                    level.set(l);
                    opened_at.set(Some((l, w.max(1.0))));
                }
            });
        }
    });
    let p3 = path.clone();
    Effect::new(move |_| {
        let (w, l) = (window.get(), level.get());
        if let (Some(c), Some(_)) = (canvas.get(), pixels.get()) {
            engine.images.with_untracked(|m| {
                if let Some(p) = m.get(&p3) {
                    draw(&c, p, w, l, invert);
                }
            });
        }
    });
    // Back to how it opened: zoom, pan and the window/level.
    let reset = move || {
        zoom.set(1.0);
        pan.set((0.0, 0.0));
        if let Some((l, w)) = opened_at.get_untracked() {
            level.set(l);
            window.set(w);
        }
    };
    let on_key = move |ev: KeyboardEvent| {
        let step = 40.0 / zoom.get_untracked();
        match ev.key().as_str() {
            "+" | "=" => zoom.update(|z| *z = (*z * 1.25).min(20.0)),
            "-" => zoom.update(|z| *z = (*z / 1.25).max(1.0)),
            "0" => reset(),
            "ArrowLeft" => pan.update(|p| p.0 += step),
            "ArrowRight" => pan.update(|p| p.0 -= step),
            "ArrowUp" => pan.update(|p| p.1 += step),
            "ArrowDown" => pan.update(|p| p.1 -= step),
            _ => return,
        }
        ev.prevent_default();
    };
    view! {
        <figure class="xray" data-testid="xray" data-inverted=invert.to_string()
            data-initial-window=move || opened_at.get().map(|(l, w)| format!("{l}/{w}"))>
            <div class="viewport" tabindex="0" aria-label=format!("{view_name} image; + and - zoom, arrows pan, 0 resets") on:keydown=on_key
                on:wheel=move |ev: WheelEvent| { ev.prevent_default(); let f = if ev.delta_y() < 0.0 { 1.15 } else { 1.0 / 1.15 }; zoom.update(|z| *z = (*z * f).clamp(1.0, 20.0)); }
                on:pointerdown=move |ev: PointerEvent| drag.set(Some((ev.client_x() as f64, ev.client_y() as f64)))
                on:pointermove=move |ev: PointerEvent| if let Some((x, y)) = drag.get_untracked() {
                    let (nx, ny) = (ev.client_x() as f64, ev.client_y() as f64);
                    let z = zoom.get_untracked();
                    pan.update(|p| { p.0 += (nx - x) / z; p.1 += (ny - y) / z; });
                    drag.set(Some((nx, ny)));
                }
                on:pointerup=move |_| drag.set(None)
                on:pointerleave=move |_| drag.set(None)
                on:dblclick=move |_| reset()>
                // Drawn to fill the viewport whatever its size: a 48×40 image is enlarged (with
                // square pixels, not blurred), as a large one is reduced.
                <canvas node_ref=canvas class:small=move || pixels.get().is_some_and(|(w, h, _)| w.max(h) < 420) style=move || { let (x, y) = pan.get(); format!("transform: scale({}) translate({x}px, {y}px)", zoom.get()) }></canvas>
                {move || pixels.get().is_none().then(|| view! { <p class="hint">"Decoding…"</p> })}
            </div>
            <figcaption>
                {view_name.clone()} " "
                {move || pixels.get().map(|(w, h, b)| format!("{w}×{h}, {b}-bit"))}
                <label>" Window " <input type="range" data-testid="xray-window" min="1" max=move || range.get().1 step="1" prop:value=move || window.get() on:input=move |ev| window.set(event_target_value(&ev).parse().unwrap_or(1.0)) /></label>
                <label>" Level " <input type="range" data-testid="xray-level" min="0" max=move || range.get().1 step="1" prop:value=move || level.get() on:input=move |ev| level.set(event_target_value(&ev).parse().unwrap_or(0.0)) /></label>
                <button class="secondary" data-testid="xray-reset" on:click=move |_| reset()>"Reset view"</button>
            </figcaption>
        </figure>
    }
}
