//! The bounds of the numbers commands take: seconds and shares, checked before use.

/// Longest `--budget` / `--measure-budget` accepted: one day.
pub const MAX_BUDGET_SECS: f64 = 86_400.0;
/// Longest `--idle-wait` accepted: one hour.
pub const MAX_IDLE_WAIT_SECS: f64 = 3_600.0;

/// A command-line number of seconds as a [`std::time::Duration`]: finite, from 0 to
/// `max`. Anything else (NaN, `inf`, `1e20`, negative) is an error naming the flag,
/// never a panic.
pub fn seconds(flag: &str, v: f64, max: f64) -> anyhow::Result<std::time::Duration> {
    if !v.is_finite() || !(0.0..=max).contains(&v) {
        anyhow::bail!("{flag} must be a number of seconds from 0 to {max}, got {v}");
    }
    std::time::Duration::try_from_secs_f64(v)
        .map_err(|e| anyhow::anyhow!("{flag}: {v} seconds: {e}"))
}

/// `--idle-threshold`: a percentage from 0 to 100, as the guard's minimum idle share.
pub fn idle_share(v: f64) -> anyhow::Result<f64> {
    Ok(crate::measure::guard::idle_share(v)?)
}
