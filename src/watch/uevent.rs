//! CPU hotplug from the kernel's uevent netlink socket (NETLINK_KOBJECT_UEVENT).
//!
//! When a CPU goes offline the kernel widens the mask of every task pinned only to
//! it, and does not narrow it back when the CPU returns; the manager re-plans and
//! re-applies on every online/offline event.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::connector::NetlinkStep;
use super::WatchError;

/// A CPU changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuChange {
    pub cpu: u32,
    pub online: bool,
}

/// A socket subscribed to kernel uevents.
#[derive(Debug)]
pub struct UeventSocket {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl UeventSocket {
    pub fn open() -> Result<UeventSocket, WatchError> {
        // Group 1: events straight from the kernel (not udev's re-broadcast).
        let fd = super::connector::open_netlink(libc::NETLINK_KOBJECT_UEVENT, 1, 1 << 20).map_err(
            |(step, source)| WatchError::Uevent {
                what: match step {
                    NetlinkStep::Socket => "socket(NETLINK_KOBJECT_UEVENT)",
                    NetlinkStep::Bind => "bind(uevent group 1)",
                },
                source,
            },
        )?;
        Ok(UeventSocket {
            fd,
            buf: vec![0u8; 16 * 1024],
        })
    }

    /// Waits up to `timeout` for a message to be readable.
    pub fn wait(&self, timeout: Duration) -> bool {
        super::readable_within(self.fd.as_raw_fd(), timeout)
    }

    /// Reads every queued message without blocking and returns the CPU changes among
    /// them. `Ok(None)` on ENOBUFS: changes were lost, re-read the online set.
    pub fn read_changes(&mut self) -> Result<Option<Vec<CpuChange>>, WatchError> {
        let mut out = Vec::new();
        loop {
            // SAFETY: receiving into our own buffer, without blocking.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(Some(out)),
                    Some(libc::EINTR) => continue,
                    Some(libc::ENOBUFS) => Ok(None),
                    _ => Err(WatchError::Uevent {
                        what: "recv",
                        source: e,
                    }),
                };
            }
            if let Some(c) = parse_uevent(&self.buf[..n as usize]) {
                out.push(c);
            }
        }
    }
}

impl AsRawFd for UeventSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Parses `ACTION@DEVPATH\0KEY=VALUE\0…` and keeps CPU online/offline events.
pub fn parse_uevent(msg: &[u8]) -> Option<CpuChange> {
    let mut action = None;
    let mut devpath = None;
    let mut subsystem = None;
    for field in msg.split(|&b| b == 0) {
        let Ok(field) = std::str::from_utf8(field) else {
            continue;
        };
        if let Some(v) = field.strip_prefix("ACTION=") {
            action = Some(v);
        } else if let Some(v) = field.strip_prefix("DEVPATH=") {
            devpath = Some(v);
        } else if let Some(v) = field.strip_prefix("SUBSYSTEM=") {
            subsystem = Some(v);
        }
    }
    if subsystem != Some("cpu") {
        return None;
    }
    let online = match action? {
        "online" => true,
        "offline" => false,
        _ => return None,
    };
    let cpu = devpath?
        .strip_prefix("/devices/system/cpu/cpu")?
        .parse()
        .ok()?;
    Some(CpuChange { cpu, online })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_online_and_offline_are_recognised() {
        let msg = b"offline@/devices/system/cpu/cpu1\0ACTION=offline\0DEVPATH=/devices/system/cpu/cpu1\0SUBSYSTEM=cpu\0SEQNUM=4321\0";
        assert_eq!(
            parse_uevent(msg),
            Some(CpuChange {
                cpu: 1,
                online: false
            })
        );
        let msg = b"online@/devices/system/cpu/cpu12\0ACTION=online\0DEVPATH=/devices/system/cpu/cpu12\0SUBSYSTEM=cpu\0";
        assert_eq!(
            parse_uevent(msg),
            Some(CpuChange {
                cpu: 12,
                online: true
            })
        );
        let msg = b"add@/devices/virtual/net/lo\0ACTION=add\0SUBSYSTEM=net\0";
        assert_eq!(parse_uevent(msg), None);
        let msg = b"change@/devices/system/cpu/cpu1\0ACTION=change\0DEVPATH=/devices/system/cpu/cpu1\0SUBSYSTEM=cpu\0";
        assert_eq!(parse_uevent(msg), None);
    }
}
