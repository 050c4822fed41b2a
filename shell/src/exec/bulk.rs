//! Bulk work off the latency path: the threads that decode a client's big
//! frame, encode a big envelope, write the store or a transcript, or free
//! a disposed session. They run as `SCHED_BATCH` with a long scheduler
//! slice (Linux ≥ 6.12, EEVDF), so a thread answering a small request (a
//! runtime worker, the driver, or another process's client) that wakes
//! while one of them holds a core takes the core at once instead of
//! waiting out the bulk thread's slice (issue 25: with 900 KB turns on two
//! cores a `ping` waited 1-6 ms for a core, though the machine was 40%
//! idle). They keep the same CPU share as any thread (same weight): under
//! full load bulk work is not starved, only preempted sooner.
//! docs/DECISIONS.md 31.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Runtime};

/// A frame or envelope over this many bytes is decoded or encoded on a
/// bulk thread, not on a runtime worker; smaller ones cost less than the
/// hand-over (a few µs), in bytes.
pub const BULK_BYTES: usize = 64 << 10;

/// Most bulk threads at once; more calls wait in the pool's queue.
const MAX_THREADS: usize = 64;

/// How long an idle bulk thread is kept, then ends. Short: memory a bulk
/// thread allocated and another thread freed goes back to the allocator's
/// pool only when the owner allocates again or ends, so an idle bulk
/// thread kept for tokio's default 10 s held megabytes (issue 25's RSS
/// after a phase).
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_millis(500);

/// The scheduler slice asked for a bulk thread, in nanoseconds: longer than
/// the default (0.75-3 ms), so any thread with the default slice that wakes
/// preempts it (the kernel's `PREEMPT_SHORT`). The kernel allows up to 100 ms.
const SLICE_NS: u64 = 20_000_000;

/// The bulk threads' pool (a runtime used only for its blocking threads).
fn pool() -> &'static Runtime {
    static POOL: OnceLock<Runtime> = OnceLock::new();
    POOL.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(MAX_THREADS)
            .thread_name("ahpd-bulk")
            .thread_keep_alive(KEEP_ALIVE)
            .on_thread_start(yield_to_interactive)
            .build()
            .unwrap_or_else(|e| panic!("could not start the bulk threads: {e}"))
    })
}

/// Runs `work` on a bulk thread and waits for its result without holding
/// a runtime worker. A panic in `work` is resumed here.
pub async fn run<T, F>(work: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match spawn(work).await {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(payload) => std::panic::resume_unwind(payload),
            // The pool is never shut down while the process runs.
            Err(e) => panic!("a bulk task was cancelled: {e}"),
        },
    }
}

/// Starts `work` on a bulk thread; its handle answers as
/// `tokio::task::spawn_blocking`'s does (an `Err` if `work` panicked).
pub fn spawn<T, F>(work: F) -> tokio::task::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    pool().spawn_blocking(work)
}

/// The kernel's `struct sched_attr` (include/uapi/linux/sched/types.h),
/// its first version's fields.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// Makes the calling thread a bulk thread: `SCHED_BATCH` (its wakeups do not
/// preempt others) with a long slice (others' wakeups preempt it). Best
/// effort: a kernel before 6.12 ignores the slice, one that refuses the
/// call leaves the thread as it was; either way the work is the same.
fn yield_to_interactive() {
    #[cfg(target_os = "linux")]
    {
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            sched_policy: libc::SCHED_BATCH as u32,
            sched_runtime: SLICE_NS,
            ..SchedAttr::default()
        };
        // SAFETY: sched_setattr(2) on the calling thread (pid 0) reads
        // `attr`, a live, initialised struct whose `size` says how much.
        #[allow(unsafe_code)]
        let done = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
        if done != 0 {
            let batch = libc::sched_param { sched_priority: 0 };
            // SAFETY: sched_setscheduler(2) on the calling thread with a
            // live `sched_param`.
            #[allow(unsafe_code)]
            let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &batch) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_a_bulk_thread_and_its_value_comes_back() {
        let name = run(|| std::thread::current().name().map(str::to_owned)).await;
        assert_eq!(name.as_deref(), Some("ahpd-bulk"));
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_bulk_thread_runs_as_batch() {
        // SAFETY: sched_getscheduler(2) on the calling thread.
        #[allow(unsafe_code)]
        let policy = run(|| unsafe { libc::sched_getscheduler(0) }).await;
        assert_eq!(policy, libc::SCHED_BATCH);
    }

    #[tokio::test]
    #[should_panic(expected = "boom")]
    async fn a_panic_in_bulk_work_reaches_the_caller() {
        run(|| panic!("boom")).await
    }
}
