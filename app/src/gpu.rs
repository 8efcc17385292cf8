//! WebGPU probing through the browser's `navigator.gpu`, read with `Reflect` so no unstable
//! web-sys APIs are needed. Runs in the worker.

use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::protocol::{AdapterReport, Event, adapter_name};

fn get(obj: &JsValue, key: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn get_str(obj: &JsValue, key: &str) -> String {
    get(obj, key).as_string().unwrap_or_default()
}

fn get_f64(obj: &JsValue, key: &str) -> f64 {
    get(obj, key).as_f64().unwrap_or(0.0)
}

async fn call_async(obj: &JsValue, method: &str, arg: &JsValue) -> Result<JsValue, JsValue> {
    let f: Function = get(obj, method).dyn_into()?;
    let p: Promise = f.call1(obj, arg)?.dyn_into()?;
    JsFuture::from(p).await
}

/// Probes WebGPU from the current global scope (window or worker).
pub async fn probe() -> Event {
    let global = js_sys::global();
    let gpu = get(&get(&global, "navigator"), "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return Event::GpuUnavailable {
            reason: "This browser does not offer WebGPU (navigator.gpu is missing). Use a current \
                     Chrome, Edge or Safari 26+, or Firefox 141+ on Windows; on Linux Chrome needs \
                     the enable-unsafe-webgpu flag."
                .into(),
        };
    }
    let opts = Object::new();
    let _ = Reflect::set(&opts, &"powerPreference".into(), &"high-performance".into());
    let adapter = match call_async(&gpu, "requestAdapter", &opts).await {
        Ok(a) if !a.is_null() && !a.is_undefined() => a,
        Ok(_) => {
            return Event::GpuUnavailable {
                reason: "WebGPU is present but the browser granted no GPU adapter (the GPU may be \
                         blocklisted or hardware acceleration turned off)."
                    .into(),
            };
        }
        Err(e) => {
            return Event::GpuUnavailable {
                reason: format!("requestAdapter failed: {}", describe(&e)),
            };
        }
    };
    let info = get(&adapter, "info");
    let features: Vec<String> = Array::from(&js_sys::Array::from(&get(&adapter, "features")))
        .iter()
        .filter_map(|v| v.as_string())
        .collect();
    let limits = get(&adapter, "limits");
    let fallback = get(&info, "isFallbackAdapter")
        .as_bool()
        .or_else(|| get(&adapter, "isFallbackAdapter").as_bool())
        .unwrap_or(false);
    let mut report = AdapterReport {
        name: adapter_name(
            &get_str(&info, "vendor"),
            &get_str(&info, "architecture"),
            &get_str(&info, "description"),
            fallback,
        ),
        vendor: get_str(&info, "vendor"),
        architecture: get_str(&info, "architecture"),
        fallback,
        shader_f16: features.iter().any(|f| f == "shader-f16"),
        subgroups: features.iter().any(|f| f == "subgroups"),
        max_buffer_size: get_f64(&limits, "maxBufferSize"),
        max_storage_binding: get_f64(&limits, "maxStorageBufferBindingSize"),
        max_workgroup_storage: get_f64(&limits, "maxComputeWorkgroupStorageSize"),
        max_invocations: get_f64(&limits, "maxComputeInvocationsPerWorkgroup"),
        features,
        device_ok: false,
    };
    // Ask for the adapter's own limits: the spec defaults (128 MiB bindings) are too small.
    let desc = Object::new();
    let req = Object::new();
    for k in ["maxBufferSize", "maxStorageBufferBindingSize"] {
        let _ = Reflect::set(&req, &k.into(), &get(&limits, k));
    }
    let _ = Reflect::set(&desc, &"requiredLimits".into(), &req);
    report.device_ok = match call_async(&adapter, "requestDevice", &desc).await {
        Ok(device) => {
            if let Ok(destroy) = get(&device, "destroy").dyn_into::<Function>() {
                let _ = destroy.call0(&device);
            }
            true
        }
        Err(_) => false,
    };
    if report.max_storage_binding < (128 << 20) as f64 {
        return Event::GpuUnavailable {
            reason: format!(
                "The WebGPU adapter {} allows only {} MiB per storage buffer; MedGemma needs 128 MiB.",
                report.name,
                report.max_storage_binding / (1 << 20) as f64
            ),
        };
    }
    Event::Gpu(report)
}

/// A readable message from a thrown JS value.
pub fn describe(e: &JsValue) -> String {
    e.as_string()
        .or_else(|| {
            e.dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .unwrap_or_else(|| format!("{e:?}"))
}
