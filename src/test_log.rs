//! For tests: what a piece of code logs, as text (one line per event, no time stamps).

use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with a subscriber of its own (this thread only) and returns what it logged.
pub fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    let lines = Lines::default();
    let out = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .without_time()
        .with_ansi(false)
        .finish();
    let (r, text) = with_subscriber(subscriber, &lines, f);
    (r, String::from_utf8_lossy(&text).into_owned())
}

/// Runs `f` with `subscriber` (this thread only) and returns what it wrote to `lines`.
fn with_subscriber<T>(
    subscriber: impl tracing::Subscriber + Send + Sync + 'static,
    lines: &Lines,
    f: impl FnOnce() -> T,
) -> (T, Vec<u8>) {
    let r = tracing::subscriber::with_default(subscriber, || {
        // Tests on other threads come and go with subscribers of their own: a call
        // site first reached while none of them wanted it must be asked again.
        tracing::callsite::rebuild_interest_cache();
        f()
    });
    let text = lines.0.lock().unwrap().clone();
    (r, text)
}

/// Runs `f` like [`logged`] and returns each event's level and message alone
/// (`INFO managing pid 7 …`): what the journal shows as MESSAGE, without the fields
/// it keeps beside it.
pub fn messages<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let lines = Lines::default();
    let out = lines.clone();
    let message_only = tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        if field.name() == "message" {
            write!(w, "{value:?}")
        } else {
            Ok(())
        }
    });
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .without_time()
        .with_ansi(false)
        .with_target(false)
        .fmt_fields(message_only)
        .finish();
    let (r, text) = with_subscriber(subscriber, &lines, f);
    let text = String::from_utf8_lossy(&text);
    (r, text.lines().map(|l| l.trim().to_string()).collect())
}
