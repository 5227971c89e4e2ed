//! What a receipt can vouch for: which layer checked each class of effect, and what nothing
//! observed. A receipt never claims more than this.

use std::{borrow::Cow, fmt::Write as _};

use serde::{Deserialize, Serialize};

use crate::monitor::dns::Questions;

/// How a receipt's claims were checked: by which layer, or that nothing saw them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Verified {
    pub exec: Cow<'static, str>,
    pub connect: Cow<'static, str>,
    pub write: Cow<'static, str>,
    /// Reads outside the call's read effects: refused by landlock, and seen only when traced.
    #[serde(default)]
    pub read: Cow<'static, str>,
    pub refusals: Cow<'static, str>,
    /// The call's DNS: what its responder judged, and what it did not.
    #[serde(default)]
    pub dns: Cow<'static, str>,
}

impl Verified {
    /// What the kernel programs check for every call, and what only `--trace-syscalls` sees.
    pub fn of(traced: bool) -> Self {
        Self {
            exec: "kernel: every exec of a file the call may read, by file identity \
                   (sched_process_exec), each unapproved one killed and reported; and guardd's \
                   seccomp listener: every execve and execveat, judged by path before the \
                   kernel went on, one of a file the call may not read (refused by landlock) \
                   reported. Not observed: an exec of a descriptor, or of a name another thread \
                   of the call rewrote while its exec waited, that landlock refused"
                .into(),
            connect: "kernel: every connect, send, bind and inet socket (cgroup sock_addr, \
                      sock_create), each unapproved one refused and reported; every packet it \
                      sends and receives, to and from approved destinations only (cgroup_skb)"
                .into(),
            write: if traced {
                "guardd's seccomp listener: every write-open (open, openat, creat, and openat2 \
                 where allowed), judged by path against the call's write rules before the \
                 kernel went on, each one outside them (refused by the read-only mount view and \
                 landlock) reported; and the kernel's open observer: every write-open that \
                 succeeded, by file identity, one outside the effects reported. Not observed: \
                 a name another thread of the call rewrote while its open waited; removals, \
                 renames, links and directories landlock refused"
            } else {
                "guardd's seccomp listener: every write-open (open, openat, creat, and openat2 \
                 where allowed), judged by path against the call's write rules before the \
                 kernel went on, each one outside them (refused by the read-only mount view and \
                 landlock) reported. Not observed: the errno each got, a name another thread of \
                 the call rewrote while its open waited, and removals, renames, links and \
                 directories landlock refused (--trace-syscalls lists them, and every open)"
            }
            .into(),
            // A listener on every read-open would cost each import and library load of every
            // call; the tracepoint costs every process on the host, so it is the operator's.
            read: if traced {
                "kernel's open observer: every open with its result; a read landlock refused \
                 (outside the read effects) is listed in files with EACCES, not a divergence"
            } else {
                "landlock refuses every read outside the call's read effects (EACCES). Not \
                 observed: which reads were attempted and refused (--trace-syscalls lists every \
                 open and its result)"
            }
            .into(),
            refusals: if traced {
                "kernel: seccomp's refusals of effect syscalls (sys_exit)"
            } else {
                "not observed: seccomp's refusals (ptrace, namespaces, mount...) need \
                 --trace-syscalls"
            }
            .into(),
            dns: "no responder: the call names no host, and a DNS query is refused as any send \
                  outside its destinations is"
                .into(),
        }
    }

    /// What a call's responder judged: every question, or how many it did not list or judge.
    pub fn dns_of(q: &Questions) -> String {
        let mut text = format!(
            "guardd's responder: every UDP:53 query over IPv4 (cgroup connect4, sendmsg4; over \
             IPv6 one is a send outside the call's destinations); {} questions judged, {} \
             distinct listed",
            q.judged,
            q.listed.len()
        );
        if q.unlisted > 0 {
            let (unlisted, refused) = (q.unlisted, q.unlisted_refused);
            let _ = write!(
                text,
                "; {unlisted} more not listed ({refused} of them refused)"
            );
        }
        if q.unreadable > 0 {
            let _ = write!(text, "; {} unreadable messages", q.unreadable);
        }
        if q.unjudged > 0 {
            let _ = write!(
                text,
                "; not observed: {} messages never judged (dropped from a full queue, or left \
                 queued at the call's end)",
                q.unjudged
            );
        }
        text
    }
}
