//! Entry point of the UI thread: mounts the app.

fn main() {
    rexvqa_app::constructors::run_once();
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(rexvqa_app::ui::App);
}
