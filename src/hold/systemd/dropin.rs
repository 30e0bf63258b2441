//! The runtime drop-ins `SetUnitProperties(runtime = true)` leaves (`/run/systemd/
//! system.control/UNIT.d/50-PROPERTY.conf`, "created via systemctl set-property"; a
//! transient unit's under `/run/systemd/transient`): read before a hold and put back as
//! they were when it lets go, so that the unit follows its files again.
//!
//! Owns: those files of [`HELD_PROPERTIES`]. Must not touch: any other drop-in
//! (`systemctl revert` would remove the administrator's too).

use super::UnitError;

/// Where systemd keeps the drop-ins of properties set at run time (`systemctl
/// set-property --runtime`, `SetUnitProperties(runtime = true)`) for the system manager.
pub const RUNTIME_CONTROL: &str = "/run/systemd/system.control";

/// Where systemd keeps transient units (`systemd-run`, scopes) with their drop-ins: a
/// property a transient unit is given at run time goes there, not to
/// [`RUNTIME_CONTROL`], and goes with the unit.
pub const RUNTIME_TRANSIENT: &str = "/run/systemd/transient";

/// The directory of `unit`'s runtime drop-ins: [`RUNTIME_TRANSIENT`] for a transient
/// unit (its unit file is there), else [`RUNTIME_CONTROL`].
pub fn runtime_dropin_dir(unit: &str) -> std::path::PathBuf {
    let transient = std::path::Path::new(RUNTIME_TRANSIENT);
    if !unit.contains('/') && transient.join(unit).is_file() {
        transient.to_path_buf()
    } else {
        std::path::PathBuf::from(RUNTIME_CONTROL)
    }
}

/// The properties whose runtime drop-ins a hold can leave.
pub const HELD_PROPERTIES: [&str; 3] = ["AllowedCPUs", "AllowedMemoryNodes", "CPUSetPartition"];

/// `DIR/UNIT.d/50-PROPERTY.conf`: the drop-in systemd writes for `property` of `unit`
/// set at run time. A unit name that could leave `dir` is refused.
pub fn runtime_dropin(
    dir: &std::path::Path,
    unit: &str,
    property: &str,
) -> Result<std::path::PathBuf, UnitError> {
    if unit.is_empty() || unit.starts_with('.') || unit.contains('/') || unit.contains('\0') {
        return Err(UnitError::Refused {
            what: format!("the runtime drop-in of unit {unit:?}"),
            reason: "not a unit name",
        });
    }
    Ok(dir
        .join(format!("{unit}.d"))
        .join(format!("50-{property}.conf")))
}

/// The text of `unit`'s runtime drop-in for `property` under `dir`; `None` when absent.
pub fn read_runtime_dropin(
    dir: &std::path::Path,
    unit: &str,
    property: &str,
) -> Result<Option<String>, UnitError> {
    let path = runtime_dropin(dir, unit, property)?;
    match crate::sysroot::read_bounded(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(UnitError::Call {
            what: path.display().to_string(),
            message: e.to_string(),
        }),
    }
}

/// Puts `unit`'s runtime drop-in for `property` under `dir` back to `text`: removed for
/// `None` (and its `UNIT.d` with it once empty), written for a text it does not have.
pub fn restore_runtime_dropin(
    dir: &std::path::Path,
    unit: &str,
    property: &str,
    text: Option<&str>,
) -> Result<(), UnitError> {
    let path = runtime_dropin(dir, unit, property)?;
    let failed = |e: std::io::Error| UnitError::Call {
        what: path.display().to_string(),
        message: e.to_string(),
    };
    match text {
        None => match std::fs::remove_file(&path) {
            Ok(()) => {
                // Only an empty directory goes: anything else in it is not pinnerd's.
                if let Some(d) = path.parent() {
                    let _ = std::fs::remove_dir(d);
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(failed(e)),
        },
        Some(t) => {
            if read_runtime_dropin(dir, unit, property)?.as_deref() == Some(t) {
                return Ok(());
            }
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d).map_err(failed)?;
            }
            std::fs::write(&path, t).map_err(failed)
        }
    }
}
