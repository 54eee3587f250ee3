//! A hang caught instead of waited for: the stream's work so far waited for
//! up to a limit, the process aborted past it (a kernel that deadlocks
//! cannot be recovered from; the abort fails the test binary). Included with
//! `#[path]` by the binaries that run kernels which could hang (the
//! warp-specialised grouped GEMMs' producer / consumer mbarriers).

use headroom_cuda::device::CudaDevice;
use headroom_cuda::event::StreamEvent;

/// Waits for the stream up to `secs`; a launch still running then is
/// reported with `what` and the process aborts.
pub fn wait_or_abort(dev: &CudaDevice, what: &str, secs: u64) {
    let e = StreamEvent::marker(dev).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = e.wait();
        let _ = tx.send(r.is_ok());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(true) => {}
        Ok(false) => panic!("{what}: the device failed"),
        Err(_) => {
            eprintln!("{what}: still running after {secs} s (a hang)");
            std::process::abort();
        }
    }
}
