//! Entry point of the engine Web Worker.

fn main() {
    rexvqa_app::constructors::run_once();
    rexvqa_app::worker::run();
}
