//! Liveness of peers on other nodes. A peer on this node is asked of the kernel by its pid
//! ([`crate::address::Process::gone`]); one elsewhere cannot be, so each rank listens on a
//! TCP port of its own (every interface, a port the kernel picks) and publishes its host
//! name, the port and a random nonce in its address record (which only the job's ranks
//! learn, through the authenticated exchange). At open a rank connects to each configured
//! peer on another node and sends that nonce; the listener keeps the connection only when
//! the nonce is its own (a foreign process holds no descriptor of the rank's) and answers
//! with its complement, which proves to the watcher that it reached that process and not
//! another one (a reused port, a host name that resolves elsewhere). When
//! a process ends, however it ends, its kernel closes these connections: a watcher's
//! non-blocking read then sees the end of the stream (or a reset), and the rank is named
//! as gone within a sweep of the driver — not after the operation timeout. A host that
//! goes down or off the network closes nothing: the watch's TCP keepalive probes it every
//! second once the connection has been quiet for a second, and after [`PROBES`] probes
//! unanswered the kernel fails the connection (`ETIMEDOUT`), which the same read sees —
//! such a peer is named as silent within about [`SILENT_AFTER`]. A process that stops
//! while its host answers (SIGSTOP, a debugger, swap) closes nothing and its kernel
//! answers the probes, so each watch has a second connection on which the listener's
//! thread sends a byte every [`BEAT_EVERY`] (a rank deep in a task still beats); a
//! watcher that has heard none for the frozen bound names the peer as frozen
//! ([`Watch::quiet_for`]). The beats have a connection of their own because incoming
//! data keeps a connection from being idle, and keepalive probes only idle ones: on the
//! watch's own connection they would hide a host whose sends are lost. A peer whose
//! watch could not be set up (its host name does not resolve here, a firewall, a host
//! that is down) stays bounded by the operation timeout alone, as before: nothing is
//! declared dead that was not first seen alive.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Both sides' greeting on a watch's connection: a name and version, then the nonce (the
/// watcher's) or its complement (the listener's answer).
const HELLO: &[u8; 8] = b"TITUSLV2";
/// The same on a watch's beat connection.
const BEATS: &[u8; 8] = b"TITUSLB2";
/// How often a listener sends a beat on each connection it holds.
pub(crate) const BEAT_EVERY: Duration = Duration::from_millis(500);
/// How often a listener looks for new connections between beats.
const ACCEPT_EVERY: Duration = Duration::from_millis(50);
/// How long a listener waits for a connection's greeting.
const GREETING_WAIT: Duration = Duration::from_millis(200);
/// How long a watcher waits to connect and hear the nonce, per address.
const CONNECT_WAIT: Duration = Duration::from_millis(500);
/// The time a rank spends setting up its watches at open, at most (a resolver that
/// hangs must not hold the job's start; later peers go unwatched).
pub(crate) const WATCH_BUDGET: Duration = Duration::from_secs(3);
/// Watches a rank sets up at most (a complete graph of thousands of peers would hold as
/// many sockets; beyond this, peers are bounded by the operation timeout).
pub(crate) const WATCH_MAX: usize = 256;
/// Keepalive: the quiet time before the first probe, the time between probes, and how
/// many go unanswered before the kernel fails the connection.
const PROBE_IDLE: Duration = Duration::from_secs(1);
const PROBE_EVERY: Duration = Duration::from_secs(1);
const PROBES: u32 = 4;
/// When a silent host's watch fails, about.
pub(crate) const SILENT_AFTER: Duration =
    Duration::from_secs(PROBE_IDLE.as_secs() + PROBE_EVERY.as_secs() * PROBES as u64);
/// A published host name's longest length (DNS's limit).
pub(crate) const HOST_MAX: usize = 253;

/// This rank's listener: accepts connections, keeps (and answers) those that greet with
/// its nonce until the fabric closes (or the process ends, which closes them all), drops
/// the others.
#[derive(Debug)]
pub(crate) struct Listener {
    pub(crate) port: u16,
    pub(crate) nonce: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Listens on every interface; `None` (with a log line) where that is refused.
    pub(crate) fn open(nonce: u64) -> Option<Listener> {
        // Both families where the host has IPv6 (Linux's `[::]` takes IPv4 too), else
        // IPv4 alone.
        let l = match TcpListener::bind(("::", 0)).or_else(|_| TcpListener::bind(("0.0.0.0", 0))) {
            Ok(l) => l,
            Err(e) => {
                tracing::info!(
                    "no liveness port (peers on other nodes bounded by the operation timeout): {e}"
                );
                return None;
            }
        };
        let port = l.local_addr().map(|a| a.port()).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        // Non-blocking, so that one thread both takes connections and beats on them.
        l.set_nonblocking(true).ok()?;
        let thread = std::thread::Builder::new()
            .name("titus-liveness".into())
            .spawn(move || {
                let mut held: Vec<TcpStream> = Vec::new();
                let mut beating: Vec<TcpStream> = Vec::new();
                let mut beat_at = Instant::now();
                while !s.load(Ordering::Acquire) {
                    match l.accept() {
                        Ok((mut c, _)) => {
                            let mut got = [0u8; 16];
                            let greeted = c.set_nonblocking(false).is_ok()
                                && c.set_read_timeout(Some(GREETING_WAIT)).is_ok()
                                && c.read_exact(&mut got).is_ok();
                            let kind = [HELLO, BEATS]
                                .into_iter()
                                .find(|k| greeted && got == greeting(k, nonce));
                            if let Some(k) = kind
                                && c.write_all(&greeting(k, !nonce)).is_ok()
                                && c.set_nonblocking(true).is_ok()
                            {
                                if k == BEATS {
                                    beating.push(c);
                                } else {
                                    held.push(c);
                                }
                            }
                            continue;
                        }
                        // Nothing waiting; or out of descriptors, say: not a loop at full
                        // speed either way.
                        Err(_) => std::thread::sleep(ACCEPT_EVERY),
                    }
                    if beat_at.elapsed() >= BEAT_EVERY {
                        beat_at = Instant::now();
                        // A full buffer (a watcher that does not read) skips a beat; a
                        // connection that failed is let go.
                        beating.retain_mut(|c| match c.write(&[0]) {
                            Ok(_) => true,
                            Err(e) => {
                                matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
                            }
                        });
                    }
                }
            })
            .ok()?;
        Some(Listener {
            port,
            nonce,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // The thread sees the flag within one accept interval.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A watched peer: the connection to its listener, non-blocking.
#[derive(Debug)]
pub(crate) struct Watch {
    stream: TcpStream,
    pub(crate) host: String,
    /// The first end seen: the kernel reports a keepalive timeout once, later reads see
    /// the end of the stream — the answer must not change from silent to closed.
    seen: std::sync::OnceLock<End>,
    /// The connection the listener beats on (None: it could not be set up, and the peer
    /// is not watched for freezing), the beats read so far, and how long their count has
    /// stood still.
    beat_stream: Option<TcpStream>,
    beats: std::sync::atomic::AtomicU64,
    still: titus_fabric::process::Stillness,
}

impl Watch {
    /// Connects to `host`:`port`, greets with `nonce` (the peer's, from its record) and
    /// checks the answer; `None` when the host does not resolve, nothing answers, or
    /// another process answers.
    pub(crate) fn connect(
        host: &str,
        port: u16,
        nonce: u64,
        resolved: &mut std::collections::HashMap<String, Vec<std::net::IpAddr>>,
    ) -> Option<Watch> {
        // Each host is resolved once per open (its ranks share it).
        let ips = resolved
            .entry(host.to_string())
            .or_insert_with(|| {
                (host, 0)
                    .to_socket_addrs()
                    .map(|a| a.map(|a| a.ip()).collect())
                    .unwrap_or_default()
            })
            .clone();
        for a in ips.into_iter().map(|ip| SocketAddr::new(ip, port)) {
            let Some(s) = greet(a, HELLO, nonce) else {
                continue;
            };
            if s.set_nonblocking(true).is_ok() && keepalive(&s).is_ok() {
                let beat_stream =
                    greet(a, BEATS, nonce).filter(|b| b.set_nonblocking(true).is_ok());
                return Some(Watch {
                    stream: s,
                    host: host.to_string(),
                    seen: std::sync::OnceLock::new(),
                    beat_stream,
                    beats: std::sync::atomic::AtomicU64::new(0),
                    still: Default::default(),
                });
            }
            let _ = s.shutdown(Shutdown::Both);
        }
        None
    }

    /// Whether the watched process's connection ended, and how: closed (its process
    /// exited or was killed, or its host closed it) or silent (its host stopped answering
    /// keepalive probes: down, or cut off). `None` while it stands, and when in doubt.
    pub(crate) fn ended(&self) -> Option<End> {
        if let Some(e) = self.seen.get() {
            return Some(*e);
        }
        let mut b = [0u8; 64];
        let end = match (&self.stream).read(&mut b) {
            Ok(0) => Some(End::Closed),
            Ok(_) => None,
            Err(e) => end_of(&e),
        };
        end.map(|e| *self.seen.get_or_init(|| e))
    }

    /// How long the watched process has sent no beat (reading those that came), by looks
    /// no further apart than the frozen rule allows (a watcher paused with the whole job
    /// starts afresh); zero where its beats are not watched. Past the frozen bound, its
    /// process has stopped while its host and kernel still answer.
    pub(crate) fn quiet_for(&self) -> Duration {
        let Some(stream) = &self.beat_stream else {
            return Duration::ZERO;
        };
        let mut b = [0u8; 64];
        // (What is left unread is read next time; an end is the watch's to see.)
        if let Ok(n) = (&*stream).read(&mut b) {
            self.beats.fetch_add(n as u64, Ordering::Relaxed);
        }
        let beats = self.beats.load(Ordering::Relaxed);
        self.still.still(titus_fabric::process::now_ns(), beats)
    }
}

/// What an error on a watch's connection says of its peer (None: nothing).
fn end_of(e: &std::io::Error) -> Option<End> {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            Some(End::Closed)
        }
        ErrorKind::WouldBlock | ErrorKind::Interrupted => None,
        // A keepalive or user timeout, or the soft error it ended on (unreachable, refused
        // by a filter): the host stopped answering.
        _ => Some(End::Silent),
    }
}

/// How a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The peer's end closed or reset the connection: its process is gone.
    Closed,
    /// The peer's host stopped answering keepalive probes.
    Silent,
}

/// Turns on `s`'s keepalive with this module's timings (probes are the kernel's: they cost
/// the peer's process nothing and are answered while it computes).
fn keepalive(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let secs = |d: Duration| d.as_secs() as libc::c_int;
    for (level, name, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(PROBE_IDLE)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(PROBE_EVERY)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, PROBES as libc::c_int),
    ] {
        // SAFETY: `s` owns an open socket for the whole call; the option value is a
        // `c_int` on the stack whose size is passed with it, as setsockopt(2) asks.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A connection's kind ([`HELLO`], [`BEATS`]) and a nonce.
fn greeting(kind: &[u8; 8], nonce: u64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(kind);
    g[8..].copy_from_slice(&nonce.to_le_bytes());
    g
}

/// Connects to `a` and greets it as a connection of `kind` with `nonce`; the stream
/// (blocking) once the listener answered with the nonce's complement.
fn greet(a: SocketAddr, kind: &[u8; 8], nonce: u64) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&a, CONNECT_WAIT).ok()?;
    s.write_all(&greeting(kind, nonce)).ok()?;
    let until = Instant::now() + CONNECT_WAIT;
    let mut got = [0u8; 16];
    let mut n = 0;
    while n < got.len() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match s.read(&mut got[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    if n == got.len() && got == greeting(kind, !nonce) {
        return Some(s);
    }
    let _ = s.shutdown(Shutdown::Both);
    None
}

/// This host's name, as peers should resolve it (`/proc/sys/kernel/hostname`); empty when
/// unknown or too long.
pub(crate) fn host_name() -> String {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let h = h.trim();
    if h.len() <= HOST_MAX && valid_host(h) {
        h.to_string()
    } else {
        String::new()
    }
}

/// Letters, digits, '-', '.' and '_' only: what another rank published is resolved here.
pub(crate) fn valid_host(h: &str) -> bool {
    h.bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_sees_its_peer_end_and_refuses_another_process() {
        let l = Listener::open(7).expect("a listener");
        assert!(
            Watch::connect("127.0.0.1", l.port, 8, &mut Default::default()).is_none(),
            "another nonce: another process"
        );
        // A foreign process that does not know the nonce is dropped: it sees the end.
        let mut intruder = TcpStream::connect(("127.0.0.1", l.port)).unwrap();
        intruder.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        intruder
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 16];
        let r = intruder.read(&mut b);
        assert!(
            matches!(&r, Ok(0))
                || r.as_ref()
                    .is_err_and(|e| e.kind() == ErrorKind::ConnectionReset),
            "no answer, and dropped: {r:?}"
        );
        let w = Watch::connect("127.0.0.1", l.port, 7, &mut Default::default()).expect("watched");
        assert_eq!(w.ended(), None, "alive");
        drop(l);
        let until = Instant::now() + Duration::from_secs(5);
        while w.ended() != Some(End::Closed) {
            assert!(Instant::now() < until, "the end was not seen");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(valid_host("node-12.cluster_a"));
        assert!(!valid_host("a b") && !valid_host("x;rm"));
    }

    /// A listener's beats keep its watch fresh; a process that answers the greeting and
    /// then sends nothing (as a stopped one, whose kernel still holds the connection)
    /// goes quiet.
    #[test]
    fn a_watch_hears_beats_and_a_quiet_process_goes_quiet() {
        let l = Listener::open(21).expect("a listener");
        let w = Watch::connect("127.0.0.1", l.port, 21, &mut Default::default()).expect("watched");
        let quiet_listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = quiet_listener.local_addr().unwrap().port();
        // Both of a watch's connections answered, then held open, silent.
        let answer = std::thread::spawn(move || {
            [(); 2].map(|()| {
                let (mut c, _) = quiet_listener.accept().unwrap();
                let mut got = [0u8; 16];
                c.read_exact(&mut got).unwrap();
                let kind: [u8; 8] = got[..8].try_into().unwrap();
                c.write_all(&greeting(&kind, !22)).unwrap();
                c
            })
        });
        let q = Watch::connect("127.0.0.1", port, 22, &mut Default::default()).expect("watched");
        let _held = answer.join().unwrap();
        let t = Instant::now();
        while t.elapsed() < BEAT_EVERY * 4 {
            assert_eq!((w.ended(), q.ended()), (None, None));
            assert!(w.quiet_for() <= BEAT_EVERY * 2, "{:?}", w.quiet_for());
            let _ = q.quiet_for();
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(q.quiet_for() >= BEAT_EVERY * 3, "{:?}", q.quiet_for());
    }

    /// Set in the copy of this test binary that runs inside the namespace.
    const IN_NETNS: &str = "TITUS_WATCH_TEST_NETNS";

    /// A host that drops off the network closes nothing: its watch must still end, as
    /// silent, within the keepalive's probes. Played in a network namespace of the test's
    /// own (its loopback taken down under a standing watch), run as a copy of this test
    /// binary under `ip netns exec`; where namespaces cannot be made (not root, no `ip`)
    /// the test says so and checks nothing.
    #[test]
    fn a_host_gone_silent_is_named_within_its_probes() {
        const NAME: &str = "watch::tests::a_host_gone_silent_is_named_within_its_probes";
        if std::env::var_os(IN_NETNS).is_some() {
            return silent_host_in_netns();
        }
        let ns = format!("titus-watch-{}", std::process::id());
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["netns", "add", &ns]) {
            eprintln!("skipped: cannot create a network namespace here (needs root and `ip`)");
            return;
        }
        struct Gone<'a>(&'a str);
        impl Drop for Gone<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "delete", self.0])
                    .status();
            }
        }
        let _gone = Gone(&ns);
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(exe)
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(IN_NETNS, "1")
            .output()
            .expect("ip netns exec");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "in the namespace: {text}");
        assert!(
            text.contains("silent after"),
            "the copy ran nothing: {text}"
        );
        println!(
            "{}",
            text.lines()
                .find(|l| l.contains("silent after"))
                .unwrap_or("")
        );
    }

    fn silent_host_in_netns() {
        let ip = |args: &[&str]| {
            let s = std::process::Command::new("ip")
                .args(args)
                .status()
                .unwrap();
            assert!(s.success(), "ip {args:?}: {s}");
        };
        ip(&["link", "set", "lo", "up"]);
        let l = Listener::open(11).expect("a listener");
        let w = Watch::connect("127.0.0.1", l.port, 11, &mut Default::default()).expect("watched");
        // Quiet past the first probe's idle time: probes are answered, the watch stands.
        std::thread::sleep(PROBE_IDLE + PROBE_EVERY * 2);
        assert_eq!(w.ended(), None, "answered probes are no end");
        ip(&["link", "set", "lo", "down"]);
        let cut = Instant::now();
        let end = loop {
            if let Some(e) = w.ended() {
                break e;
            }
            assert!(
                cut.elapsed() < SILENT_AFTER * 3,
                "no end seen {:?} after the network went away",
                cut.elapsed()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(end, End::Silent, "nothing closed the connection");
        println!("silent after {:.2} s", cut.elapsed().as_secs_f64());
        // Its listener, whose thread sleeps in accept on a dead network, ends with this
        // process.
        std::mem::forget(l);
    }
}
