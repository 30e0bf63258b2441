//! The spin pair engine: two named threads pinned to two CPUs bounce a cache line and
//! time the round trips.
//!
//! Each pair gets a fresh anonymous page; its first toucher (one chosen participant,
//! recorded) decides where the memory lives. The lines sit 256 bytes apart so the
//! adjacent-line prefetcher (128-byte pairs) never couples them. Threads start behind
//! a gate once both have pinned and verified the pin; the initiator then runs batches,
//! each K round trips between two sync points where both sides read their CPU and
//! context-switch count. A batch during which either side was switched out or was not
//! on its CPU is discarded, never averaged in.
//!
//! Must not touch: scheduling pairs (see `schedule`) or turning batches into figures
//! (see `estimator`); the initiator only asks `StopRule` when to stop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::around::SpinPriority;
use super::estimator::StopRule;
use super::pinned::{context_switches, current_cpu, pin_current, PinFailure};
use super::{FirstTouch, MeasureError, Primitive};

pub mod crew;

// CAS protocol states of the one shared line.
const IDLE: u64 = 0;
const PING: u64 = 1;
const PONG: u64 = 2;
const SYNC: u64 = 3;
const ACK: u64 = 4;
const STOP: u64 = 5;
// Load/store protocol: sequence numbers count up from 1; these two are reserved.
const LS_SYNC: u64 = u64::MAX - 1;
const LS_STOP: u64 = u64::MAX;

/// One 256-byte slot: its own line, and the line after it stays unused.
#[repr(C, align(256))]
struct Slot<T>(T);

/// What the responder reports at each sync point.
struct Report {
    switches: AtomicU64,
    cpu: AtomicU64,
}

/// The shared page's layout.
#[repr(C)]
struct Shared {
    /// The CAS line, or the initiator's line in load/store mode.
    ping: Slot<AtomicU64>,
    /// The responder's line in load/store mode.
    pong: Slot<AtomicU64>,
    report: Slot<Report>,
}

/// A fresh anonymous page holding `Shared`. Nothing backs it until first touched.
struct Page {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the page is only accessed through atomics in `Shared`.
unsafe impl Send for Page {}
unsafe impl Sync for Page {}

impl Page {
    fn new() -> Result<Page, MeasureError> {
        let len = 4096.max(std::mem::size_of::<Shared>());
        // SAFETY: an anonymous private mapping with no address hint; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(MeasureError::Memory(std::io::Error::last_os_error()));
        }
        Ok(Page { ptr, len })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: the mapping is page-aligned (≥ 256), at least size_of::<Shared>()
        // long, zero-filled (a valid all-zero `Shared` of atomics) and lives as long
        // as `self`.
        unsafe { &*(self.ptr as *const Shared) }
    }

    /// Writes every line once, so this thread's CPU decides where the page lives.
    fn touch(&self) {
        let s = self.shared();
        s.ping.0.store(IDLE, Ordering::SeqCst);
        s.pong.0.store(0, Ordering::SeqCst);
        s.report.0.switches.store(0, Ordering::SeqCst);
        s.report.0.cpu.store(0, Ordering::SeqCst);
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; no references outlive `self`.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// Start gate: threads check in after pinning, then wait for go (or abort).
#[derive(Default)]
pub struct Gate {
    state: Mutex<(usize, Option<bool>)>,
    cv: Condvar,
}

impl Gate {
    fn arrive_and_wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        while s.1.is_none() {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.1 == Some(true)
    }

    /// Waits for `n` arrivals, then opens (`go`) or aborts.
    fn open_when(&self, n: usize, go: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if go {
            while s.0 < n {
                s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
        s.1 = Some(go);
        self.cv.notify_all();
    }
}

/// How to run one pair.
#[derive(Debug, Clone)]
pub struct PairPlan {
    pub initiator: u32,
    pub responder: u32,
    pub primitive: Primitive,
    pub first_touch: FirstTouch,
    /// Unmeasured ping-pong before the first batch (frequency and caches warm up).
    pub warm: Duration,
    /// Wanted duration of one batch; K is calibrated from it.
    pub batch: Duration,
    pub stop: StopRule,
    /// Stop taking batches after this instant, whatever the rule says.
    pub deadline: Instant,
    /// The scheduling priority both threads take before they pin.
    pub priority: SpinPriority,
}

/// What one pair produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairRun {
    /// Valid batch figures: one-way latency in ns (round-trip mean / 2).
    pub batches: Vec<f64>,
    /// Batches thrown away because a thread was switched out.
    pub switched: u32,
    /// Batches thrown away because a thread was not on its CPU.
    pub migrated: u32,
    /// Round trips per batch.
    pub round_trips: u32,
    /// Set when a pin did not hold; then `batches` is empty.
    pub pin_failure: Option<PinFailure>,
    /// The partner did not answer for [`STALL`]; the pair was given up.
    pub stalled: bool,
}

/// Largest K: keeps a batch bounded even on a very fast line.
const MAX_ROUND_TRIPS: u64 = 1 << 16;
const MIN_ROUND_TRIPS: u64 = 16;
/// Give up on a pair after this many discarded batches in a row.
const MAX_DISCARDED_IN_A_ROW: u32 = 200;

/// Failure flags published before the gate: 0 ok, 1 failed.
struct Setup {
    initiator: Mutex<Option<PinFailure>>,
    responder: Mutex<Option<PinFailure>>,
}

/// A started pair: two named threads, running once the gate opens.
pub struct PairThreads {
    initiator: JoinHandle<PairRun>,
    responder: JoinHandle<()>,
    initiator_name: String,
    responder_name: String,
}

/// Spawns the two threads of a pair (named `pinnerd-spin-<own cpu>-<partner cpu>`).
/// They pin, verify, touch the line (the chosen side first) and wait at `gate`.
pub fn spawn_pair(plan: PairPlan, gate: Arc<Gate>) -> Result<PairThreads, MeasureError> {
    let page = Arc::new(Page::new()?);
    let setup = Arc::new(Setup {
        initiator: Mutex::new(None),
        responder: Mutex::new(None),
    });
    // The first toucher signals the other through this one-shot.
    let touched = Arc::new((Mutex::new(false), Condvar::new()));
    let r_name = format!("pinnerd-spin-{}-{}", plan.responder, plan.initiator);
    let i_name = format!("pinnerd-spin-{}-{}", plan.initiator, plan.responder);

    let responder = {
        let (page, setup, gate, touched) =
            (page.clone(), setup.clone(), gate.clone(), touched.clone());
        let cpu = plan.responder;
        let first = plan.first_touch == FirstTouch::Responder;
        let primitive = plan.primitive;
        let priority = plan.priority;
        std::thread::Builder::new()
            .name(r_name.clone())
            .spawn(move || {
                lower_priority(priority);
                let pinned = pin_current(cpu);
                touch_in_order(&page, first, &touched, pinned.is_ok());
                *setup.responder.lock().unwrap_or_else(|e| e.into_inner()) = pinned.err();
                if !gate.arrive_and_wait() {
                    return;
                }
                let failed = setup
                    .initiator
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_some()
                    || setup
                        .responder
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .is_some();
                if failed {
                    return;
                }
                respond(page.shared(), primitive);
            })
            .map_err(|source| MeasureError::Spawn {
                name: r_name.clone(),
                source,
            })?
    };
    let initiator = {
        let (page, setup, gate, touched) = (page, setup, gate.clone(), touched.clone());
        std::thread::Builder::new()
            .name(i_name.clone())
            .spawn(move || {
                lower_priority(plan.priority);
                let pinned = pin_current(plan.initiator);
                let first = plan.first_touch == FirstTouch::Initiator;
                touch_in_order(&page, first, &touched, pinned.is_ok());
                *setup.initiator.lock().unwrap_or_else(|e| e.into_inner()) = pinned.err();
                if !gate.arrive_and_wait() {
                    return PairRun::default();
                }
                let failure = setup
                    .initiator
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .or_else(|| {
                        setup
                            .responder
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .clone()
                    });
                if let Some(f) = failure {
                    return PairRun {
                        pin_failure: Some(f),
                        ..PairRun::default()
                    };
                }
                initiate(page.shared(), &plan)
            })
    };
    match initiator {
        Ok(initiator) => Ok(PairThreads {
            initiator,
            responder,
            initiator_name: i_name,
            responder_name: r_name,
        }),
        Err(source) => {
            // The responder would wait at the gate forever: release it, and let the
            // first-touch handshake go on without the initiator.
            let (m, cv) = &*touched;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
            gate.open_when(0, false);
            let _ = responder.join();
            Err(MeasureError::Spawn {
                name: i_name,
                source,
            })
        }
    }
}

/// Takes `p` for the calling spin thread. A refusal leaves it at the caller's priority,
/// which only makes it compete harder: logged, not fatal.
pub fn lower_priority(p: SpinPriority) {
    if let Err(e) = p.apply_to_this_thread() {
        tracing::debug!(priority = p.as_str(), error = %e, "spinner priority not set");
    }
}

/// The chosen side touches first and signals; the other waits for that, then touches
/// nothing (the page is already placed). A side whose pin failed still signals, so the
/// other never waits forever.
fn touch_in_order(page: &Page, first: bool, touched: &(Mutex<bool>, Condvar), ok: bool) {
    let (m, cv) = touched;
    if first {
        if ok {
            page.touch();
        }
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    } else {
        let mut done = m.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl PairThreads {
    /// Joins both threads; a panic in either is an error naming the thread.
    pub fn join(self) -> Result<PairRun, MeasureError> {
        let run = self.initiator.join();
        let resp = self.responder.join();
        let run = run.map_err(|_| MeasureError::ThreadPanicked {
            name: self.initiator_name,
        })?;
        resp.map_err(|_| MeasureError::ThreadPanicked {
            name: self.responder_name,
        })?;
        Ok(run)
    }
}

/// Opens the gate for `threads` waiting threads.
pub fn open(gate: &Gate, threads: usize) {
    gate.open_when(threads, true);
}

/// Aborts a gate: every thread waiting at it returns without measuring.
pub fn abort(gate: &Gate) {
    gate.open_when(0, false);
}

/// Runs one pair to completion on the calling thread pair: spawn, open, join.
pub fn run_pair(plan: PairPlan) -> Result<PairRun, MeasureError> {
    let gate = Arc::new(Gate::default());
    let threads = spawn_pair(plan, gate.clone())?;
    open(&gate, 2);
    threads.join()
}

// ---- the two sides ----------------------------------------------------------------

fn respond(s: &Shared, primitive: Primitive) {
    let report = |r: &Report| {
        r.switches.store(context_switches(), Ordering::Relaxed);
        r.cpu.store(current_cpu() as u64, Ordering::Relaxed);
    };
    match primitive {
        Primitive::Cas => loop {
            match s
                .ping
                .0
                .compare_exchange(PONG, PING, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {}
                Err(SYNC) => {
                    report(&s.report.0);
                    s.ping.0.store(ACK, Ordering::Release);
                }
                Err(STOP) => return,
                Err(_) => {}
            }
        },
        Primitive::LoadStore => {
            let mut last = 0;
            loop {
                let v = s.ping.0.load(Ordering::Acquire);
                if v == last {
                    continue;
                }
                last = v;
                match v {
                    LS_STOP => return,
                    LS_SYNC => report(&s.report.0),
                    _ => {}
                }
                s.pong.0.store(v, Ordering::Release);
            }
        }
    }
}

/// How long the initiator waits for its partner before giving the pair up: a partner
/// that does not answer for this long is not running (a real-time task holds its CPU,
/// or the vCPU is frozen), and waiting forever would hang the whole measurement.
pub const STALL: Duration = Duration::from_secs(1);

/// Counts spins and looks at the clock every 2^16 of them.
struct Watch {
    start: Instant,
    spins: u32,
}

impl Watch {
    fn new() -> Watch {
        Watch {
            start: Instant::now(),
            spins: 0,
        }
    }

    /// True once the wait has lasted longer than [`STALL`].
    #[inline(always)]
    fn stalled(&mut self) -> bool {
        self.spins = self.spins.wrapping_add(1);
        self.spins & 0xffff == 0 && self.start.elapsed() > STALL
    }

    /// Spins (with the spin-loop hint) until `done`; `None` once the wait has lasted
    /// longer than [`STALL`].
    #[inline(always)]
    fn until(&mut self, done: impl Fn() -> bool) -> Option<()> {
        while !done() {
            if self.stalled() {
                return None;
            }
            std::hint::spin_loop();
        }
        Some(())
    }
}

/// The initiator's side of one sync point: the responder reports and acknowledges.
/// Returns the responder's (switches, cpu), or `None` when it stalled.
fn sync(s: &Shared, primitive: Primitive) -> Option<(u64, u64)> {
    let mut watch = Watch::new();
    match primitive {
        Primitive::Cas => {
            // The line is PING (after a batch) or IDLE/ACK (before the first one).
            s.ping.0.store(SYNC, Ordering::Release);
            watch.until(|| s.ping.0.load(Ordering::Acquire) == ACK)?;
        }
        Primitive::LoadStore => {
            s.ping.0.store(LS_SYNC, Ordering::Release);
            watch.until(|| s.pong.0.load(Ordering::Acquire) == LS_SYNC)?;
        }
    }
    Some((
        s.report.0.switches.load(Ordering::Relaxed),
        s.report.0.cpu.load(Ordering::Relaxed),
    ))
}

/// K round trips; returns the elapsed time, or `None` when the partner stalled.
fn batch(s: &Shared, primitive: Primitive, k: u64, seq: &mut u64) -> Option<Duration> {
    let mut watch = Watch::new();
    match primitive {
        Primitive::Cas => {
            s.ping.0.store(PING, Ordering::Release);
            let t0 = Instant::now();
            for _ in 0..k {
                while s
                    .ping
                    .0
                    .compare_exchange(PING, PONG, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    if watch.stalled() {
                        return None;
                    }
                }
            }
            // Wait for the K-th answer.
            while s.ping.0.load(Ordering::Acquire) != PING {
                if watch.stalled() {
                    return None;
                }
            }
            Some(t0.elapsed())
        }
        Primitive::LoadStore => {
            let t0 = Instant::now();
            for _ in 0..k {
                *seq += 1;
                let v = *seq;
                s.ping.0.store(v, Ordering::Release);
                while s.pong.0.load(Ordering::Acquire) != v {
                    if watch.stalled() {
                        return None;
                    }
                }
            }
            Some(t0.elapsed())
        }
    }
}

fn stop(s: &Shared, primitive: Primitive) {
    match primitive {
        Primitive::Cas => s.ping.0.store(STOP, Ordering::Release),
        Primitive::LoadStore => s.ping.0.store(LS_STOP, Ordering::Release),
    }
}

fn initiate(s: &Shared, plan: &PairPlan) -> PairRun {
    let mut run = PairRun::default();
    if measure_pair(s, plan, &mut run).is_none() {
        run.stalled = true;
    }
    stop(s, plan.primitive);
    run
}

/// The initiator's loop; `None` when the partner stalled (the batches so far stay).
fn measure_pair(s: &Shared, plan: &PairPlan, run: &mut PairRun) -> Option<()> {
    let p = plan.primitive;
    let me = u64::from(plan.initiator);
    let partner = u64::from(plan.responder);
    let mut seq = 0u64;

    // Warm up and calibrate K: grow K until a batch takes a tenth of the target, and
    // keep bouncing (unmeasured) until the warm-up time is over.
    let warm_until = Instant::now() + plan.warm;
    // The fastest warm batch sets K: a preempted one would make K too small.
    let mut k = MIN_ROUND_TRIPS;
    let mut per_rt = Duration::MAX;
    loop {
        let d = batch(s, p, k, &mut seq)?;
        if d * 10 < plan.batch && k < MAX_ROUND_TRIPS {
            k *= 2;
            continue;
        }
        per_rt = per_rt.min(d / k as u32);
        if Instant::now() >= warm_until {
            break;
        }
    }
    let (mut r_sw, _) = sync(s, p)?;
    let per_rt_ns = (per_rt.as_nanos() as u64).max(1);
    let k = (plan.batch.as_nanos() as u64 / per_rt_ns).clamp(MIN_ROUND_TRIPS, MAX_ROUND_TRIPS);
    run.round_trips = k as u32;

    let mut discarded_in_a_row = 0;
    // A pair that got this far takes at least one valid batch, deadline or not.
    while !plan.stop.done(&run.batches)
        && (Instant::now() < plan.deadline || run.batches.is_empty())
    {
        let my_sw = context_switches();
        let my_cpu = current_cpu() as u64;
        let d = batch(s, p, k, &mut seq)?;
        let (sw, cpu) = sync(s, p)?;
        let my_sw_after = context_switches();
        let my_cpu_after = current_cpu() as u64;
        let switched = my_sw_after != my_sw || sw != r_sw;
        let moved = my_cpu != me || my_cpu_after != me || cpu != partner;
        r_sw = sw;
        if moved {
            run.migrated += 1;
        } else if switched {
            run.switched += 1;
        } else {
            run.batches.push(d.as_nanos() as f64 / k as f64 / 2.0);
            discarded_in_a_row = 0;
            continue;
        }
        discarded_in_a_row += 1;
        if discarded_in_a_row >= MAX_DISCARDED_IN_A_ROW {
            break;
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_cpus() -> (u32, u32) {
        let ids: Vec<u32> = crate::measure::allowed_cpus().unwrap().iter().collect();
        assert!(ids.len() >= 2, "the engine needs two CPUs to test");
        (ids[0], ids[1])
    }

    fn plan(primitive: Primitive) -> PairPlan {
        let (a, b) = two_cpus();
        PairPlan {
            initiator: a,
            responder: b,
            primitive,
            first_touch: FirstTouch::Initiator,
            warm: Duration::from_millis(1),
            batch: Duration::from_micros(20),
            stop: StopRule {
                min_batches: 10,
                max_batches: 40,
                ..StopRule::default()
            },
            deadline: Instant::now() + Duration::from_secs(5),
            priority: SpinPriority::Normal,
        }
    }

    #[test]
    fn both_primitives_produce_batches() {
        let _spin = crate::measure::one_spinner_at_a_time();
        for p in [Primitive::Cas, Primitive::LoadStore] {
            let run = run_pair(plan(p)).unwrap();
            assert_eq!(run.pin_failure, None);
            assert!(run.round_trips >= MIN_ROUND_TRIPS as u32, "{run:?}");
            assert!(
                !run.batches.is_empty() || run.switched + run.migrated >= 1,
                "{p:?}: {run:?}"
            );
            for b in &run.batches {
                assert!(*b > 0.0 && *b < 1_000_000.0, "{p:?}: {b}");
            }
        }
    }

    #[test]
    fn a_pin_that_cannot_hold_yields_no_samples() {
        let _spin = crate::measure::one_spinner_at_a_time();
        let mut p = plan(Primitive::Cas);
        p.responder = 4000;
        let run = run_pair(p).unwrap();
        assert!(run.batches.is_empty());
        assert!(
            matches!(run.pin_failure, Some(PinFailure::Refused { cpu: 4000, .. })),
            "{run:?}"
        );
    }

    #[test]
    fn threads_are_named_after_their_cpus() {
        let _spin = crate::measure::one_spinner_at_a_time();
        let (a, b) = two_cpus();
        let gate = Arc::new(Gate::default());
        let mut p = plan(Primitive::Cas);
        p.stop.max_batches = 1;
        let t = spawn_pair(p, gate.clone()).unwrap();
        assert_eq!(
            t.initiator.thread().name(),
            Some(&*format!("pinnerd-spin-{a}-{b}"))
        );
        assert_eq!(
            t.responder.thread().name(),
            Some(&*format!("pinnerd-spin-{b}-{a}"))
        );
        abort(&gate);
        assert_eq!(t.join().unwrap(), PairRun::default());
    }

    #[test]
    fn a_partner_that_never_answers_is_given_up() {
        let _spin = crate::measure::one_spinner_at_a_time();
        for primitive in [Primitive::Cas, Primitive::LoadStore] {
            let page = Page::new().unwrap();
            page.touch();
            // No responder thread at all: the first batch never completes.
            let t0 = Instant::now();
            let run = initiate(page.shared(), &plan(primitive));
            assert!(run.stalled, "{run:?}");
            assert!(run.batches.is_empty());
            assert!(t0.elapsed() >= STALL, "gave up after {:?}", t0.elapsed());
        }
    }

    #[test]
    fn several_pairs_behind_one_gate_all_finish() {
        let _spin = crate::measure::one_spinner_at_a_time();
        // Two pairs sharing both CPUs (never done for real: rounds are disjoint) is the
        // worst case for the gate and the discard logic: four spinning threads on two
        // CPUs keep switching each other out.
        let (a, b) = two_cpus();
        let gate = Arc::new(Gate::default());
        let mut threads = Vec::new();
        for (x, y) in [(a, b), (b, a)] {
            let mut p = plan(Primitive::Cas);
            p.initiator = x;
            p.responder = y;
            p.deadline = Instant::now() + Duration::from_millis(300);
            threads.push(spawn_pair(p, gate.clone()).unwrap());
        }
        open(&gate, 4);
        for t in threads {
            let run = t.join().unwrap();
            assert_eq!(run.pin_failure, None);
            // Every batch either counted or was discarded for a reason.
            assert!(
                run.stalled || run.round_trips >= MIN_ROUND_TRIPS as u32,
                "{run:?}"
            );
        }
    }

    #[test]
    fn the_page_is_padded() {
        assert_eq!(std::mem::offset_of!(Shared, pong), 256);
        assert_eq!(std::mem::offset_of!(Shared, report), 512);
        assert!(std::mem::size_of::<Shared>() <= 4096);
    }
}
