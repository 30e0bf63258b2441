//! The netlink proc connector: FORK (processes and threads), EXEC, COMM and EXIT.
//!
//! The socket is opened and subscribed here with a timeout on the kernel's
//! acknowledgement: outside the initial namespaces the kernel silently ignores the
//! subscription and never answers, so a blocking wait would hang the caller forever.
//! Messages are parsed by the `proc-connector` crate's parser.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use proc_connector::{NetlinkMessageIter, ProcEvent};

use super::WatchError;

/// A process event, named for what the manager does with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcMsg {
    /// A new process `pid` forked from process `parent`.
    NewProcess { pid: i32, parent: i32 },
    /// A new thread `tid` in process `pid` (FORK with tid ≠ tgid), created by thread
    /// `parent` (whose comm it inherits).
    NewThread { pid: i32, tid: i32, parent: i32 },
    /// Process `pid` called execve.
    Exec { pid: i32 },
    /// Task `tid` of process `pid` renamed itself.
    Comm { pid: i32, tid: i32, comm: String },
    /// Task `tid` of process `pid` exited (`tid == pid`: the main thread).
    Exit { pid: i32, tid: i32 },
    /// The kernel dropped events (ENOBUFS): only a full rescan can catch up.
    Overrun,
}

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const NLMSG_HDRLEN: usize = 16;
const CN_MSG_LEN: usize = 20;

/// A subscribed proc connector socket.
#[derive(Debug)]
pub struct Connector {
    fd: OwnedFd,
    buf: Vec<u8>,
    /// Events that arrived with the subscription acknowledgement.
    early: Vec<ProcMsg>,
}

fn last_err(what: &'static str) -> WatchError {
    WatchError::Connector {
        what,
        source: std::io::Error::last_os_error(),
    }
}

fn set_timeout(fd: RawFd, t: Duration) -> Result<(), WatchError> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: a valid timeval of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(last_err("setsockopt(SO_RCVTIMEO)"));
    }
    Ok(())
}

/// Sets a receive buffer of `bytes`, past `rmem_max` when privileged.
/// Which call of [`open_netlink`] failed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NetlinkStep {
    Socket,
    Bind,
}

/// A netlink datagram socket of `protocol`, with a receive buffer of about
/// `recv_buffer` bytes, bound to the multicast `groups`.
pub(crate) fn open_netlink(
    protocol: libc::c_int,
    groups: u32,
    recv_buffer: usize,
) -> Result<OwnedFd, (NetlinkStep, std::io::Error)> {
    let fail = |step| (step, std::io::Error::last_os_error());
    // SAFETY: plain socket(2) call; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if raw < 0 {
        return Err(fail(NetlinkStep::Socket));
    }
    // SAFETY: `raw` is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_rcvbuf(fd.as_raw_fd(), recv_buffer);
    // SAFETY: zeroed sockaddr_nl is valid; fields set below.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = groups;
    // SAFETY: valid sockaddr of the size given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(fail(NetlinkStep::Bind));
    }
    Ok(fd)
}

pub(crate) fn set_rcvbuf(fd: RawFd, bytes: usize) -> usize {
    let size = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: a valid c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            break;
        }
    }
    let mut got: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &mut got as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    got.max(0) as usize
}

impl Connector {
    /// Opens, binds and subscribes, waiting at most `timeout` for the kernel's
    /// acknowledgement. Blocks the calling thread: call it off the async runtime.
    pub fn open(timeout: Duration, recv_buffer: usize) -> Result<Connector, WatchError> {
        let fd = open_netlink(NETLINK_CONNECTOR, CN_IDX_PROC, recv_buffer).map_err(
            |(what, source)| WatchError::Connector {
                what: match what {
                    NetlinkStep::Socket => "socket(NETLINK_CONNECTOR)",
                    NetlinkStep::Bind => "bind(CN_IDX_PROC)",
                },
                source,
            },
        )?;

        // nlmsghdr + cn_msg + u32 op
        let total = NLMSG_HDRLEN + CN_MSG_LEN + 4;
        let mut msg = vec![0u8; total];
        msg[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
        msg[4..6].copy_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg[12..16].copy_from_slice(&std::process::id().to_ne_bytes());
        let cn = &mut msg[NLMSG_HDRLEN..];
        cn[0..4].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
        cn[4..8].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
        cn[16..18].copy_from_slice(&4u16.to_ne_bytes());
        cn[20..24].copy_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: sending our own buffer to the kernel (address from bind: nl_pid 0).
        let rc = unsafe {
            libc::send(
                fd.as_raw_fd(),
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                0,
            )
        };
        if rc < 0 {
            return Err(last_err("send(PROC_CN_MCAST_LISTEN)"));
        }

        let mut conn = Connector {
            fd,
            buf: vec![0u8; 64 * 1024],
            early: Vec::new(),
        };
        set_timeout(conn.fd.as_raw_fd(), timeout)?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if std::time::Instant::now() >= deadline {
                return Err(WatchError::ConnectorSilent { timeout });
            }
            let n = match conn.recv_datagram() {
                Ok(n) => n,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Err(WatchError::ConnectorSilent { timeout }),
                    Some(libc::EINTR) | Some(libc::ENOBUFS) => continue,
                    _ => {
                        return Err(WatchError::Connector {
                            what: "recv(subscription acknowledgement)",
                            source: e,
                        })
                    }
                },
            };
            let mut acked = None;
            for item in NetlinkMessageIter::new(&conn.buf, n) {
                match item {
                    Ok(Some(ProcEvent::Unknown { what: 0, raw_data })) if raw_data.len() >= 4 => {
                        let err = i32::from_ne_bytes(raw_data[..4].try_into().unwrap_or([0; 4]));
                        acked = Some(err);
                    }
                    Ok(Some(ev)) => conn.early.extend(translate(ev)),
                    Ok(None) | Err(_) => {}
                }
            }
            match acked {
                Some(0) => break,
                Some(err) => {
                    return Err(WatchError::Connector {
                        what: "PROC_CN_MCAST_LISTEN",
                        source: std::io::Error::from_raw_os_error(err.abs()),
                    })
                }
                None => continue,
            }
        }
        set_timeout(conn.fd.as_raw_fd(), Duration::ZERO)?;
        Ok(conn)
    }

    /// Makes [`Connector::read`] return at once when nothing is queued.
    pub fn set_nonblocking(&self) -> Result<(), WatchError> {
        // SAFETY: fcntl on our own descriptor.
        let flags = unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0
            || unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }
                < 0
        {
            return Err(last_err("fcntl(O_NONBLOCK)"));
        }
        Ok(())
    }

    /// Waits up to `timeout` for events to be readable.
    pub fn wait(&self, timeout: Duration) -> bool {
        super::readable_within(self.fd.as_raw_fd(), timeout)
    }

    /// Receives one datagram (blocking unless non-blocking was set) and appends its
    /// events to `out`. Returns the number appended; 0 when nothing was queued.
    /// ENOBUFS appends [`ProcMsg::Overrun`].
    pub fn read(&mut self, out: &mut Vec<ProcMsg>) -> Result<usize, WatchError> {
        self.receive(|m, _| out.push(m))
    }

    /// As [`Connector::read`], with each event's kernel timestamp (CLOCK_MONOTONIC
    /// nanoseconds; 0 for an overrun), for latency measurements.
    pub fn read_timed(&mut self, out: &mut Vec<(ProcMsg, u64)>) -> Result<usize, WatchError> {
        self.receive(|m, ts| out.push((m, ts)))
    }

    /// Receives one datagram and hands each of its events, with its timestamp, to
    /// `push`; returns how many.
    fn receive(&mut self, mut push: impl FnMut(ProcMsg, u64)) -> Result<usize, WatchError> {
        let mut count = 0;
        let mut push = |m, ts| {
            count += 1;
            push(m, ts);
        };
        for m in self.early.drain(..) {
            push(m, 0);
        }
        let n = match self.recv_datagram() {
            Ok(n) => n,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(count),
                    Some(libc::ENOBUFS) => {
                        push(ProcMsg::Overrun, 0);
                        Ok(count)
                    }
                    _ => Err(WatchError::Connector {
                        what: "recv",
                        source: e,
                    }),
                }
            }
        };
        for item in NetlinkMessageIter::new(&self.buf, n) {
            match item {
                Ok(Some(ev)) => {
                    let ts = timestamp(&ev);
                    if let Some(m) = translate(ev) {
                        push(m, ts);
                    }
                }
                Ok(None) => {}
                Err(proc_connector::Error::Overrun) => push(ProcMsg::Overrun, 0),
                Err(e) => tracing::debug!(error = %e, "unparsable proc connector message"),
            }
        }
        Ok(count)
    }

    /// Receives one datagram into the buffer; its length, or the errno as an error.
    fn recv_datagram(&mut self) -> std::io::Result<usize> {
        // SAFETY: receiving into our own buffer, whose pointer and length are passed.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr() as *mut libc::c_void,
                self.buf.len(),
                0,
            )
        };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    }
}

impl AsRawFd for Connector {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn timestamp(ev: &ProcEvent) -> u64 {
    match ev {
        ProcEvent::Fork { timestamp_ns, .. }
        | ProcEvent::Exec { timestamp_ns, .. }
        | ProcEvent::Comm { timestamp_ns, .. }
        | ProcEvent::Exit { timestamp_ns, .. } => *timestamp_ns,
        _ => 0,
    }
}

fn translate(ev: ProcEvent) -> Option<ProcMsg> {
    Some(match ev {
        ProcEvent::Fork {
            parent_pid,
            parent_tgid,
            child_pid,
            child_tgid,
            ..
        } => {
            if child_pid == child_tgid {
                ProcMsg::NewProcess {
                    pid: child_tgid as i32,
                    parent: parent_tgid as i32,
                }
            } else {
                ProcMsg::NewThread {
                    pid: child_tgid as i32,
                    tid: child_pid as i32,
                    parent: parent_pid as i32,
                }
            }
        }
        ProcEvent::Exec { tgid, .. } => ProcMsg::Exec { pid: tgid as i32 },
        ProcEvent::Comm {
            pid, tgid, comm, ..
        } => {
            let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
            ProcMsg::Comm {
                pid: tgid as i32,
                tid: pid as i32,
                comm: String::from_utf8_lossy(&comm[..end]).into_owned(),
            }
        }
        ProcEvent::Exit { pid, tgid, .. } => ProcMsg::Exit {
            pid: tgid as i32,
            tid: pid as i32,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_of_threads_and_processes_are_told_apart() {
        let fork = |cp, ct| ProcEvent::Fork {
            cpu: 0,
            seq: 0,
            parent_pid: 1,
            parent_tgid: 1,
            child_pid: cp,
            child_tgid: ct,
            timestamp_ns: 0,
        };
        assert_eq!(
            translate(fork(5, 5)),
            Some(ProcMsg::NewProcess { pid: 5, parent: 1 })
        );
        assert_eq!(
            translate(fork(6, 5)),
            Some(ProcMsg::NewThread {
                pid: 5,
                tid: 6,
                parent: 1
            })
        );
        let mut comm = [0u8; 16];
        comm[..3].copy_from_slice(b"rx0");
        assert_eq!(
            translate(ProcEvent::Comm {
                cpu: 0,
                seq: 0,
                pid: 7,
                tgid: 5,
                comm,
                timestamp_ns: 0
            }),
            Some(ProcMsg::Comm {
                pid: 5,
                tid: 7,
                comm: "rx0".into()
            })
        );
    }
}
