use super::*;
use crate::api::Call;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::oneshot::error::TryRecvError;

/// Generous bound for what must happen while the other side is stuck: a liveness
/// check, not a timing goal.
const LIVENESS: Duration = Duration::from_secs(60);

/// Makes a `ListManaged` call as the bus would and waits for its answer: `Err` is
/// the refusal a dropped reply gives the caller ("the daemon is shutting down").
fn call_list_managed(tx: &mpsc::Sender<Event>) -> Result<(), &'static str> {
    let (reply, mut answer) = tokio::sync::oneshot::channel();
    tx.blocking_send(Event::Command(Call::ListManaged {
        caller_uid: 0,
        reply,
    }))
    .unwrap();
    let until = Instant::now() + LIVENESS;
    loop {
        match answer.try_recv() {
            Ok(_) => return Ok(()),
            Err(TryRecvError::Closed) => return Err("refused: stopping"),
            Err(TryRecvError::Empty) => {
                assert!(Instant::now() < until, "the call was not answered");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Waits until `f` holds, at most [`LIVENESS`]; panics naming `what`.
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let until = Instant::now() + LIVENESS;
    while !f() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The loop's last phase on its own thread, as `Shell::wind_down` runs it.
fn winding_down(
    mut rx: mpsc::Receiver<Event>,
    bell: Arc<Doorbell>,
    ended: impl FnMut() -> bool + Send + 'static,
    until: Duration,
    pings: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let waker = Waker::from(bell.clone());
        let mut cx = Context::from_waker(&waker);
        wind_down(
            &mut rx,
            &mut cx,
            &bell,
            ended,
            Instant::now() + until,
            Some(Duration::from_millis(10)),
            || {
                pings.fetch_add(1, Ordering::Relaxed);
            },
        )
    })
}

/// While the holder undoes its units (here: stuck until the test lets it go), the
/// loop answers a call at once and keeps pinging the watchdog; it ends when the
/// holder says it ended, woken by the doorbell.
#[test]
fn while_the_holder_undoes_the_loop_answers_and_pings_the_watchdog() {
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let bell = Arc::new(Doorbell::new().unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let pings = Arc::new(AtomicUsize::new(0));
    let flag = done.clone();
    let looping = winding_down(
        rx,
        bell.clone(),
        move || flag.load(Ordering::Acquire),
        Duration::from_secs(3600),
        pings.clone(),
    );
    assert_eq!(call_list_managed(&tx), Err("refused: stopping"));
    let seen = pings.load(Ordering::Relaxed);
    wait_until("no watchdog ping while the holder undid", || {
        pings.load(Ordering::Relaxed) >= seen + 3
    });
    assert!(!looping.is_finished(), "the loop waits for the holder");
    done.store(true, Ordering::Release);
    bell.ring();
    assert!(looping.join().unwrap(), "it ended when the holder did");
}

/// The real holder thread, stuck connecting to systemd when the daemon stops:
/// `stop` returns at once, the loop answers meanwhile, and the thread's end wakes
/// it once it has undone everything.
#[test]
fn a_holder_stuck_in_a_systemd_call_does_not_hold_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().to_path_buf();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let bell = Arc::new(Doorbell::new().unwrap());
    let ring = bell.clone();
    let holder = super::super::holding::HolderThread::start(
        move || {
            // A systemd that does not answer, until the test says.
            let _ = gate_rx.recv();
            crate::hold::Holder::new(
                Err(crate::hold::systemd::UnitError::NoSystemd(
                    "not reachable".into(),
                )),
                Err(crate::hold::partition::Unable::NoCgroup2),
                crate::hold::Journal::new(&runtime),
                Box::new(|_, _, _, _| 0),
            )
        },
        |_, _| {},
        move || ring.ring(),
    )
    .unwrap();
    holder.stop(Duration::from_secs(5));
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let pings = Arc::new(AtomicUsize::new(0));
    let holder = std::sync::Mutex::new(holder);
    let looping = winding_down(
        rx,
        bell,
        move || holder.lock().unwrap().ended(),
        Duration::from_secs(3600),
        pings.clone(),
    );
    assert_eq!(call_list_managed(&tx), Err("refused: stopping"));
    wait_until("no watchdog ping while the holder was stuck", || {
        pings.load(Ordering::Relaxed) >= 2
    });
    assert!(!looping.is_finished(), "the loop waits for the holder");
    gate_tx.send(()).unwrap();
    assert!(looping.join().unwrap(), "the holder's end woke the loop");
}

/// A holder that never ends: the loop gives up at its bound and says so.
#[test]
fn a_holder_that_never_ends_is_given_up_at_the_bound() {
    let (_tx, rx) = mpsc::channel(EVENT_QUEUE);
    let bell = Arc::new(Doorbell::new().unwrap());
    let pings = Arc::new(AtomicUsize::new(0));
    let looping = winding_down(rx, bell, || false, Duration::from_millis(50), pings.clone());
    assert!(!looping.join().unwrap());
    assert!(pings.load(Ordering::Relaxed) >= 1, "pinged at once");
}

#[test]
fn the_holder_is_stopped_well_within_the_units_stop_timeout() {
    let unit = include_str!("../../../systemd/pinnerd.service");
    let timeout: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.trim().strip_suffix('s'))
        .and_then(|v| v.parse().ok())
        .expect("the unit sets TimeoutStopSec= in seconds");
    assert!(HOLDER_RELEASE < HOLDER_STOP);
    // Restoring the masks before it and the exit after it keep 5 s of the timeout.
    assert!(
        HOLDER_STOP + Duration::from_secs(5) <= Duration::from_secs(timeout),
        "the holder may take {HOLDER_STOP:?} of TimeoutStopSec={timeout}s"
    );
}

/// A daemon that observes another machine (`daemon --machine`) has a mover and a holder
/// that refuse every job, saying why, and looks for no journal of holds to recover.
#[test]
fn an_observing_daemon_s_workers_move_no_memory_and_hold_no_unit() {
    let (tx, _rx) = mpsc::channel(4);
    let root = crate::sysroot::SysRoot::new("/nonexistent/sys", "/nonexistent/proc");
    let mut w = Workers::observing(&root, &tx).unwrap();
    let why = w.moves.get().err().expect("the mover refuses");
    assert!(why.contains("moves no memory"), "{why}");
    let why = w.holder.get().err().expect("the holder refuses");
    assert!(why.contains("holds no unit"), "{why}");
    assert!(w.moves.running().is_none() && w.holder.running().is_none());
    assert_eq!(w.hold_journal, None);
}
