//! The device wrapper the browser runs on (`destroying_device`, #33) gives the same logits as
//! the plain device and destroys the buffers CubeCL releases. Natively wgpu validates every call,
//! so a buffer destroyed while an unsubmitted encoder still names it fails the submit here, as
//! it would in a browser. The device is chosen when the process opens it, so the test runs
//! itself as two child processes on lavapipe, with the browser's pool, wrapped and plain.

mod common;

use rexvqa_engine::destroying_device::Counts;
use rexvqa_engine::image::Policy;

/// Set in the children.
const CHILD: &str = "REXVQA_DESTROYING_TEST_CHILD";
/// The line a child prints its result on.
const MARK: &str = "DESTROYING_RESULT ";

#[derive(serde::Serialize, serde::Deserialize)]
struct ChildResult {
    /// The last position's logits of the golden one-image prompt, twice: the image encoded
    /// again and the prompt prefilled again, with the pools' free pages given back in between,
    /// so that the second round runs on buffers created after the first round's were destroyed.
    logits: Vec<Vec<f32>>,
    /// The wrapper's counts at the end.
    counts: Counts,
    /// CubeCL's reserved bytes at the end.
    reserved: u64,
    /// The live-bytes peak right after `reset_peak`.
    peak_after_reset: u64,
}

fn child() {
    let golden = common::golden_json_gz("tiny_tiny-q8_0.json.gz");
    let (text, mmproj) = common::tiny_pair(&golden);
    let device = rexvqa_engine::device::wgpu().expect("a wgpu adapter (lavapipe)");
    let model = common::load_model(&text, Some(mmproj.as_path()), &device);
    let ids = common::token_ids(&golden["prompts"]["official_one_image"]["input_ids"]);
    let png =
        std::fs::read(common::repo_root().join("tests/fixtures/images/tiny_ref_0.png")).unwrap();
    let pixels = model.preprocess_file(&png, Policy::Scale).unwrap();
    let logits = (0..2)
        .map(|_| {
            let image = model.encode_image(&pixels).unwrap();
            let logits = pollster::block_on(model.last_logits(&ids, &[image])).unwrap();
            rexvqa_engine::device::release_free_memory(&device).unwrap();
            logits
        })
        .collect();
    let counts = rexvqa_engine::destroying_device::counts();
    rexvqa_engine::destroying_device::reset_peak();
    let result = ChildResult {
        logits,
        counts,
        reserved: device.memory_pool_usage().map_or(0, |u| u.bytes_reserved),
        peak_after_reset: rexvqa_engine::destroying_device::counts().peak_live_bytes,
    };
    println!("{MARK}{}", serde_json::to_string(&result).unwrap());
}

fn run_child(destroying: bool) -> ChildResult {
    let envs = [
        (CHILD, "1"),
        ("REXVQA_EXCLUSIVE_POOL", "1"),
        (
            "REXVQA_DESTROYING_DEVICE",
            if destroying { "1" } else { "0" },
        ),
    ];
    let json = common::rerun_self("destroying_device_matches_the_plain_device", &envs, MARK);
    serde_json::from_str(&json).unwrap()
}

#[test]
fn destroying_device_matches_the_plain_device() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let wrapped = run_child(true);
    let plain = run_child(false);
    eprintln!("wrapped {:?}, plain {:?}", wrapped.counts, plain.counts);
    assert_eq!(
        plain.counts,
        Counts::default(),
        "the plain device wraps nothing"
    );
    assert!(
        wrapped.counts.destroyed > 0,
        "the wrapped device destroyed no buffer: CubeCL's released buffers would wait for a \
         garbage collection in a browser"
    );
    // Every page CubeCL reserves is a buffer the wrapper created and has not destroyed; what
    // the wrapper holds beyond them is released buffers waiting for their encoders.
    let c = wrapped.counts;
    assert!(
        c.created_bytes >= c.destroyed_bytes && c.live_bytes() >= wrapped.reserved,
        "{c:?}: live bytes below CubeCL's {} reserved",
        wrapped.reserved
    );
    assert!(c.peak_live_bytes >= c.live_bytes() && c.peak_live_bytes > wrapped.reserved);
    assert_eq!(
        wrapped.peak_after_reset,
        c.live_bytes(),
        "reset_peak starts the peak from the bytes live now"
    );
    assert_eq!(wrapped.logits.len(), plain.logits.len());
    for (round, (w, p)) in wrapped.logits.iter().zip(&plain.logits).enumerate() {
        assert_eq!(w.len(), p.len());
        // The same kernels on the same device: a difference means a destroyed buffer was read
        // or a submit failed, never rounding.
        let worst = w
            .iter()
            .zip(p)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst == 0.0 && w.iter().all(|x| x.is_finite()),
            "round {round}: the wrapped device's logits differ from the plain device's by up \
             to {worst}"
        );
    }
}

/// The wrapper's counts are per process: the tests that read them take turns.
static COUNTED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A lavapipe device and queue through the wrapper, outside CubeCL.
fn wrapped_device() -> (wgpu::Device, wgpu::Queue) {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::PRIMARY,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .expect("a wgpu adapter (lavapipe)");
    let (device, queue) =
        pollster::block_on(adapter.request_device(&Default::default())).expect("a device on it");
    rexvqa_engine::destroying_device::wrap(device, queue)
}

fn read(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Vec<u8> {
    buffer.map_async(wgpu::MapMode::Read, .., |r| r.expect("the buffer maps"));
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("the device polls");
    let bytes = buffer
        .get_mapped_range(..)
        .expect("a mapped range")
        .to_vec();
    buffer.unmap();
    bytes
}

/// CubeCL's pattern, made deterministic: a buffer released while the open encoder still names
/// it, then another encoder submitted before that one (CubeCL's write flushes and readbacks do
/// this). The buffer must outlive both submits: destroying it at the first would invalidate
/// the second, which wgpu reports as a validation error.
#[test]
fn a_released_buffer_outlives_the_encoder_that_names_it() {
    let _turn = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let (device, queue) = wrapped_device();
    let before = rexvqa_engine::destroying_device::counts();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let data: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
    let source = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("released"),
        size: data.len() as u64,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(&source, 0, &data);
    let target = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("read back"),
        size: data.len() as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut open = device.create_command_encoder(&Default::default());
    open.copy_buffer_to_buffer(&source, 0, &target, 0, None);
    drop(source);
    // An encoder created after the release and submitted first.
    let other = device.create_command_encoder(&Default::default());
    queue.submit([other.finish()]);
    let mid = rexvqa_engine::destroying_device::counts();
    queue.submit([open.finish()]);
    let after = rexvqa_engine::destroying_device::counts();
    assert_eq!(
        read(&device, &target),
        data,
        "the copy of the released buffer"
    );
    let error = pollster::block_on(scope.pop());
    assert!(error.is_none(), "validation error: {error:?}");
    assert_eq!(
        mid.destroyed, before.destroyed,
        "destroyed while an open encoder named it"
    );
    assert_eq!(
        after.destroyed,
        before.destroyed + 1,
        "not destroyed once the encoder naming it was submitted"
    );
}

/// CubeCL keeps an encoder open between submits, empty until its next launch. A buffer released
/// meanwhile cannot be named by anything that encoder records later (the handle is gone), so it
/// is destroyed at once rather than at the next submit, which may be far off when the page is
/// idle. The encoder then records and submits without a validation error.
#[test]
fn an_encoder_that_has_recorded_nothing_holds_no_release_back() {
    let _turn = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let (device, queue) = wrapped_device();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let data: Vec<u8> = (0..256u32).map(|i| (i * 3) as u8).collect();
    let make = |label, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: data.len() as u64,
            usage,
            mapped_at_creation: false,
        })
    };
    let source = make(
        "kept",
        wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    );
    queue.write_buffer(&source, 0, &data);
    let target = make(
        "read back",
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
    );
    let released = make("released", wgpu::BufferUsages::COPY_DST);
    let mut open = device.create_command_encoder(&Default::default());
    let before = rexvqa_engine::destroying_device::counts();
    drop(released);
    let after_drop = rexvqa_engine::destroying_device::counts();
    open.copy_buffer_to_buffer(&source, 0, &target, 0, None);
    queue.submit([open.finish()]);
    assert_eq!(read(&device, &target), data, "the copy after the release");
    let error = pollster::block_on(scope.pop());
    assert!(error.is_none(), "validation error: {error:?}");
    assert_eq!(
        after_drop.destroyed,
        before.destroyed + 1,
        "a buffer released while the only open encoder was empty waited for its submit"
    );
}
