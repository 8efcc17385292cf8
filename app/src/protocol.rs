//! Messages between the UI thread and the engine worker, serialised as JSON strings.

use serde::{Deserialize, Serialize};

/// UI → worker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Probe WebGPU and report the adapter.
    ProbeGpu,
}

/// What the worker found about WebGPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct AdapterReport {
    /// `vendor`, `architecture`, `device`, `description` joined for display.
    pub name: String,
    /// GPUAdapterInfo.vendor.
    pub vendor: String,
    /// GPUAdapterInfo.architecture.
    pub architecture: String,
    /// Whether the browser gave a software (fallback) adapter.
    pub fallback: bool,
    /// Whether `shader-f16` is available.
    pub shader_f16: bool,
    /// Whether `subgroups` is available.
    pub subgroups: bool,
    /// maxBufferSize in bytes.
    pub max_buffer_size: f64,
    /// maxStorageBufferBindingSize in bytes.
    pub max_storage_binding: f64,
    /// maxComputeWorkgroupStorageSize in bytes.
    pub max_workgroup_storage: f64,
    /// maxComputeInvocationsPerWorkgroup.
    pub max_invocations: f64,
    /// Every feature name the adapter lists.
    pub features: Vec<String>,
    /// Whether a device with the adapter's limits was created.
    pub device_ok: bool,
}

/// Worker → UI.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The worker has started and can take requests.
    Ready,
    /// WebGPU works; here is the adapter.
    Gpu(AdapterReport),
    /// WebGPU is unusable, with a plain explanation.
    GpuUnavailable {
        /// What the browser lacks, in words a user can act on.
        reason: String,
    },
    /// A request failed.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl Request {
    /// JSON text for postMessage.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("requests always serialise")
    }
}

impl Event {
    /// JSON text for postMessage.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events always serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_tagged_json() {
        let e = Event::GpuUnavailable {
            reason: "no".into(),
        };
        assert_eq!(e.to_json(), r#"{"type":"gpu_unavailable","reason":"no"}"#);
        assert_eq!(serde_json::from_str::<Event>(&e.to_json()).unwrap(), e);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"type":"probe_gpu"}"#).unwrap(),
            Request::ProbeGpu
        );
    }
}
