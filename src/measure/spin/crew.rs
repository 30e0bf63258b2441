//! A crew of spinners: one thread per CPU, started, pinned and verified once, then fed a
//! pair each round. What completion runs its rounds on.
//!
//! ```text
//! start(cpus) ── one thread per CPU: priority, pin + verify, touch its own page ── ready
//! round(plans) ── coordinator: a job on both seats of each pair, rings the initiator
//!                 initiator: rings its responder ── both re-verify the pin, meet ──
//!                 the pair runs (spin::initiate / spin::respond) on the page of the
//!                 side that touches first ── each seat says done; the last wakes the
//!                 coordinator ── the initiators' runs, in order
//! drop ── every thread told to quit, joined
//! ```
//!
//! [`super::spawn_pair`] starts two threads per pair per round and joins them: that
//! spawning and joining is serial on the coordinating thread (210 µs a pair on the build
//! VM, `benches/README.md`), so a round of 2,048 pairs spent 430 ms before its 7 ms of
//! spinning. A crew pays a thread start once per CPU per slice and, per pair of a round,
//! one wake-up and one result read on the coordinator (the responder is woken by its
//! initiator, in parallel).
//!
//! Same measurement as a pair's own threads: each side pins (and verifies the pin again
//! before every pair), the page the pair bounces was first touched by the side
//! [`FirstTouch`](crate::measure::FirstTouch) names (each CPU's thread touches its own
//! page before anything else does, so the page lives where that CPU allocates), a pair
//! whose pin does not hold gives no batches, and a partner that does not turn up within
//! [`STALL`] is given up.
//!
//! Threads are named `pinnerd-spin-<cpu>-crew`.
//!
//! Must not touch: which pairs run (see `complete`, `schedule`), figures (see
//! `estimator`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{JoinHandle, Thread};
use std::time::Instant;

use super::{initiate, lower_priority, respond, Page, PairPlan, PairRun, STALL};
use crate::measure::around::SpinPriority;
use crate::measure::pinned::{pin_current, PinFailure};
use crate::measure::{FirstTouch, MeasureError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the two sides of one pair meet before spinning.
#[derive(Default)]
struct Meet {
    /// Per side (initiator, responder): `None` until it arrived, then its pin's result.
    state: Mutex<MeetState>,
    cv: Condvar,
}

#[derive(Default)]
struct MeetState {
    initiator: Option<Option<PinFailure>>,
    responder: Option<Option<PinFailure>>,
    /// The initiator gave up waiting: the responder must not spin.
    abandoned: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Initiator,
    Responder,
}

/// What a seat does this round.
struct Job {
    plan: PairPlan,
    role: Role,
    page: Arc<Page>,
    /// This side resets the page's lines before meeting (it touched the page first).
    owner: bool,
    meet: Arc<Meet>,
    /// The responder's seat, which the initiator rings.
    partner: Option<Arc<Seat>>,
}

/// One CPU's thread: its bell, its job, its result.
struct Seat {
    cpu: u32,
    /// Counts rings; the thread runs a job each time it moves.
    bell: AtomicU64,
    job: Mutex<Option<Job>>,
    run: Mutex<Option<PairRun>>,
    /// Its own page, touched by it after pinning.
    page: Mutex<Option<Arc<Page>>>,
    thread: Mutex<Option<Thread>>,
    /// A job panicked on this thread (it still checks out, so the round ends).
    panicked: AtomicBool,
    /// The thread's id, once it started.
    tid: std::sync::atomic::AtomicI32,
}

impl Seat {
    fn ring(&self) {
        self.bell.fetch_add(1, Ordering::AcqRel);
        if let Some(t) = lock(&self.thread).as_ref() {
            t.unpark();
        }
    }
}

/// What the coordinator and every thread share.
struct Board {
    quit: AtomicBool,
    /// Seats still busy this round (or still starting).
    left: AtomicUsize,
    /// The thread waiting for `left` to reach 0.
    waiter: Mutex<Option<Thread>>,
}

impl Board {
    fn done_one(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(t) = lock(&self.waiter).as_ref() {
                t.unpark();
            }
        }
    }

    /// Parks the calling thread until every seat is done.
    fn wait_all(&self) {
        while self.left.load(Ordering::Acquire) > 0 {
            std::thread::park();
        }
    }
}

/// Spinner threads on a set of CPUs, fed a round at a time.
pub struct Crew {
    seats: Vec<Arc<Seat>>,
    /// Seat index by CPU id.
    at: std::collections::BTreeMap<u32, usize>,
    board: Arc<Board>,
    handles: Vec<JoinHandle<()>>,
    /// How long the last round took the coordinator to hand out its jobs.
    fed: std::cell::Cell<std::time::Duration>,
}

impl Crew {
    /// Starts one thread per CPU of `cpus` at `priority`; returns once each has pinned
    /// itself (or failed to: its pairs then report the failure) and touched its page.
    pub fn start(cpus: &[u32], priority: SpinPriority) -> Result<Crew, MeasureError> {
        let board = Arc::new(Board {
            quit: AtomicBool::new(false),
            left: AtomicUsize::new(cpus.len()),
            waiter: Mutex::new(Some(std::thread::current())),
        });
        let mut crew = Crew {
            seats: Vec::with_capacity(cpus.len()),
            at: Default::default(),
            board: board.clone(),
            handles: Vec::with_capacity(cpus.len()),
            fed: Default::default(),
        };
        for &cpu in cpus {
            let seat = Arc::new(Seat {
                cpu,
                bell: AtomicU64::new(0),
                job: Mutex::new(None),
                run: Mutex::new(None),
                page: Mutex::new(None),
                thread: Mutex::new(None),
                panicked: AtomicBool::new(false),
                tid: Default::default(),
            });
            let name = format!("pinnerd-spin-{cpu}-crew");
            let (s, b) = (seat.clone(), board.clone());
            let spawned = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || serve(&s, &b, priority));
            match spawned {
                Ok(h) => {
                    *lock(&seat.thread) = Some(h.thread().clone());
                    crew.at.insert(cpu, crew.seats.len());
                    crew.seats.push(seat);
                    crew.handles.push(h);
                }
                Err(source) => {
                    // The ones not started never check in.
                    let missing = cpus.len() - crew.seats.len();
                    board.left.fetch_sub(missing, Ordering::AcqRel);
                    board.wait_all();
                    drop(crew);
                    return Err(MeasureError::Spawn { name, source });
                }
            }
        }
        board.wait_all();
        if crew.seats.iter().any(|s| lock(&s.page).is_none()) {
            return Err(MeasureError::Memory(std::io::Error::other(
                "a spinner's page could not be mapped",
            )));
        }
        Ok(crew)
    }

    /// The CPUs the crew has a thread on.
    pub fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.at.keys().copied()
    }

    /// The thread ids of the crew, by CPU.
    pub fn tids(&self) -> Vec<(u32, i32)> {
        self.at
            .iter()
            .map(|(&cpu, &k)| (cpu, self.seats[k].tid.load(Ordering::Acquire)))
            .collect()
    }

    /// How long the coordinator took to hand out the last round's jobs (the part of a
    /// round that grows with its pairs and is not done in parallel).
    pub fn last_feed(&self) -> std::time::Duration {
        self.fed.get()
    }

    /// Whether every CPU of `plans` has a thread and no CPU is in two pairs.
    pub fn covers(&self, plans: &[PairPlan]) -> bool {
        let mut seen = std::collections::BTreeSet::new();
        plans.iter().all(|p| {
            p.initiator != p.responder
                && self.at.contains_key(&p.initiator)
                && self.at.contains_key(&p.responder)
                && seen.insert(p.initiator)
                && seen.insert(p.responder)
        })
    }

    /// Runs the disjoint pairs of `plans` at once and returns their runs in order; a
    /// panic on one of the threads is an error naming it. Panics if [`Crew::covers`]
    /// does not hold.
    pub fn round(&self, plans: &[PairPlan]) -> Result<Vec<PairRun>, MeasureError> {
        assert!(
            self.covers(plans),
            "a crew round needs disjoint pairs of its CPUs"
        );
        let t0 = Instant::now();
        *lock(&self.board.waiter) = Some(std::thread::current());
        self.board.left.store(2 * plans.len(), Ordering::Release);
        let mut initiators = Vec::with_capacity(plans.len());
        let mut used = Vec::with_capacity(2 * plans.len());
        for plan in plans {
            let i = &self.seats[self.at[&plan.initiator]];
            let r = &self.seats[self.at[&plan.responder]];
            let owner = match plan.first_touch {
                FirstTouch::Initiator => i,
                FirstTouch::Responder => r,
            };
            let page = lock(&owner.page)
                .clone()
                .expect("a started seat has a page");
            let meet = Arc::new(Meet::default());
            for (seat, role) in [(r, Role::Responder), (i, Role::Initiator)] {
                *lock(&seat.run) = None;
                *lock(&seat.job) = Some(Job {
                    plan: plan.clone(),
                    role,
                    page: page.clone(),
                    owner: Arc::ptr_eq(seat, owner),
                    meet: meet.clone(),
                    partner: (role == Role::Initiator).then(|| r.clone()),
                });
            }
            i.ring();
            initiators.push(i);
            used.extend([i, r]);
        }
        self.fed.set(t0.elapsed());
        self.board.wait_all();
        if let Some(s) = used
            .iter()
            .find(|s| s.panicked.swap(false, Ordering::AcqRel))
        {
            return Err(MeasureError::ThreadPanicked {
                name: format!("pinnerd-spin-{}-crew", s.cpu),
            });
        }
        Ok(initiators
            .into_iter()
            .map(|s| lock(&s.run).take().unwrap_or_default())
            .collect())
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.board.quit.store(true, Ordering::Release);
        for s in &self.seats {
            s.ring();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A crew thread: pin, touch its page, check in; then one job per ring until told to
/// quit.
fn serve(seat: &Seat, board: &Board, priority: SpinPriority) {
    seat.tid
        .store(crate::affinity::own_tid(), Ordering::Release);
    lower_priority(priority);
    let pinned = pin_current(seat.cpu);
    match Page::new() {
        Ok(page) => {
            if pinned.is_ok() {
                page.touch();
            }
            *lock(&seat.page) = Some(Arc::new(page));
        }
        Err(e) => tracing::debug!(cpu = seat.cpu, error = %e, "crew page not mapped"),
    }
    board.done_one();
    let mut heard = 0;
    loop {
        loop {
            let now = seat.bell.load(Ordering::Acquire);
            if now != heard {
                heard = now;
                break;
            }
            std::thread::park();
        }
        if board.quit.load(Ordering::Acquire) {
            return;
        }
        let Some(job) = lock(&seat.job).take() else {
            continue;
        };
        if let Some(partner) = &job.partner {
            partner.ring();
        }
        let ran =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(seat.cpu, &job)));
        match ran {
            Ok(run) if job.role == Role::Initiator => *lock(&seat.run) = Some(run),
            Ok(_) => {}
            Err(_) => seat.panicked.store(true, Ordering::Release),
        }
        board.done_one();
    }
}

/// One side of one pair: verify the pin, reset the page if this side owns it, meet the
/// partner, spin.
fn run_job(cpu: u32, job: &Job) -> PairRun {
    let pinned = pin_current(cpu);
    if job.owner && pinned.is_ok() {
        job.page.touch();
    }
    let (mine, theirs) = {
        let mut st = lock(&job.meet.state);
        match job.role {
            Role::Initiator => st.initiator = Some(pinned.err()),
            Role::Responder => st.responder = Some(pinned.err()),
        }
        job.meet.cv.notify_all();
        let until = Instant::now() + STALL;
        loop {
            if st.abandoned {
                return PairRun::default();
            }
            if let (Some(i), Some(r)) = (&st.initiator, &st.responder) {
                break match job.role {
                    Role::Initiator => (i.clone(), r.clone()),
                    Role::Responder => (r.clone(), i.clone()),
                };
            }
            let now = Instant::now();
            if now >= until && job.role == Role::Initiator {
                st.abandoned = true;
                return PairRun {
                    stalled: true,
                    ..PairRun::default()
                };
            }
            // The responder waits for as long as the initiator does.
            let wait = until.saturating_duration_since(now).max(STALL / 10);
            st = job
                .meet
                .cv
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    };
    if let Some(f) = mine.or(theirs) {
        return PairRun {
            pin_failure: Some(f),
            ..PairRun::default()
        };
    }
    let shared = job.page.shared();
    match job.role {
        Role::Initiator => initiate(shared, &job.plan),
        Role::Responder => {
            respond(shared, job.plan.primitive);
            PairRun::default()
        }
    }
}

#[cfg(test)]
mod tests;
