//! The app shell offline: registers the service worker (`sw.js`, written by
//! `scripts/sw-hook.mjs` at build time), and offers a new build once it is installed. The worker
//! serves every shell file from one cache per build, so the page, its wasm and the engine
//! worker's files always come from the same build; an update is taken only when the user asks,
//! by reloading onto the new build's cache.

use std::cell::Cell;
use std::rc::Rc;

use leptos::prelude::*;
use wasm_bindgen::prelude::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    ServiceWorker, ServiceWorkerContainer, ServiceWorkerRegistration, ServiceWorkerState,
};

/// How often an open page asks the server for a new build (the browser also asks on each load).
const UPDATE_CHECK_MS: i32 = 30 * 60 * 1000;

/// The page's service worker, when the browser offers one (a secure context).
fn container() -> Option<ServiceWorkerContainer> {
    let nav = web_sys::window()?.navigator();
    js_sys::Reflect::has(&nav, &"serviceWorker".into())
        .unwrap_or(false)
        .then(|| nav.service_worker())
}

/// Registers `sw.js`; `ready` turns true when a new build waits to take over this page.
fn register(
    ready: RwSignal<bool>,
    registration: StoredValue<Option<ServiceWorkerRegistration>, LocalStorage>,
) {
    let Some(sw) = container() else { return };
    let promise = sw.register("./sw.js");
    leptos::task::spawn_local(async move {
        let reg: ServiceWorkerRegistration = match JsFuture::from(promise).await {
            Ok(r) => r.unchecked_into(),
            Err(e) => {
                web_sys::console::warn_2(&"offline start unavailable: sw.js".into(), &e);
                return;
            }
        };
        // A build installed while no page of the old one asked for it (an earlier visit).
        if reg.waiting().is_some() && sw.controller().is_some() {
            ready.set(true);
        }
        // An install already under way when the registration resolved, and each one after.
        if let Some(installing) = reg.installing() {
            watch(&sw, &installing, ready);
        }
        let (sw2, reg2) = (sw.clone(), reg.clone());
        let on_found = Closure::<dyn FnMut()>::new(move || {
            if let Some(installing) = reg2.installing() {
                watch(&sw2, &installing, ready);
            }
        });
        reg.set_onupdatefound(Some(on_found.as_ref().unchecked_ref()));
        on_found.forget();
        let reg3 = reg.clone();
        // Offline, the check fails: that is no error worth a console line.
        let ignore = Closure::<dyn FnMut(JsValue)>::new(|_| {});
        let check = Closure::<dyn FnMut()>::new(move || {
            if let Ok(p) = reg3.update() {
                let _ = p.catch(&ignore);
            }
        });
        if let Some(w) = web_sys::window() {
            let _ = w.set_interval_with_callback_and_timeout_and_arguments_0(
                check.as_ref().unchecked_ref(),
                UPDATE_CHECK_MS,
            );
        }
        check.forget();
        registration.set_value(Some(reg));
    });
}

/// Sets `ready` once `installing` has installed as an update (with no controller it is the
/// first install, which takes the page by itself).
fn watch(sw: &ServiceWorkerContainer, installing: &ServiceWorker, ready: RwSignal<bool>) {
    let (sw, watched) = (sw.clone(), installing.clone());
    let on_state = Closure::<dyn FnMut()>::new(move || {
        if watched.state() == ServiceWorkerState::Installed && sw.controller().is_some() {
            ready.set(true);
        }
    });
    installing.set_onstatechange(Some(on_state.as_ref().unchecked_ref()));
    on_state.forget();
}

/// Lets the waiting build take over, and reloads onto it once it controls the page.
fn take(reg: &ServiceWorkerRegistration) {
    let (Some(sw), Some(waiting)) = (container(), reg.waiting()) else {
        return;
    };
    let reloading = Rc::new(Cell::new(false));
    let on_change = Closure::<dyn FnMut()>::new(move || {
        if !reloading.replace(true)
            && let Some(w) = web_sys::window()
        {
            let _ = w.location().reload();
        }
    });
    sw.set_oncontrollerchange(Some(on_change.as_ref().unchecked_ref()));
    on_change.forget();
    let _ = waiting.post_message(&"skip-waiting".into());
}

/// The notice of a new build, with the button that takes it.
#[component]
pub fn UpdateNotice() -> impl IntoView {
    let ready = RwSignal::new(false);
    let registration = StoredValue::new_local(None::<ServiceWorkerRegistration>);
    register(ready, registration);
    let on_take = move |_| {
        registration.with_value(|r| r.iter().for_each(take));
    };
    move || {
        ready.get().then(|| view! {
            <div class="notice" role="status" data-testid="update-ready">
                <p>"A new version of the app is ready. Reload to use it (a run in progress resumes from its last saved answer)."</p>
                <button data-testid="update-reload" on:click=on_take>"Reload now"</button>
            </div>
        })
    }
}
