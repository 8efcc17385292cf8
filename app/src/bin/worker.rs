//! Entry point of the engine Web Worker.

fn main() {
    rexvqa_app::worker::run();
}
