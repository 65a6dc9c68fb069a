//! tierlab-serve: any stack as a real block device over NBD.
//!
//! `Server::bind` builds the stack of a config (backing stores, the policy
//! over them: tierlab-stack, the builder every executor shares), opens the
//! IO engine and listens; `Server::run` serves until stopped. One thread
//! runs everything in a mio event loop: the sockets, the NBD protocol
//! (tierlab-nbd's sans-IO state machine, one per connection), the stack
//! (tierlab-real's data path: the policy, its timers, the IO engine, whose
//! wake-up descriptor sits in the same poll), signals. No thread hand-off
//! per request; IOs on RAM are memory copies done inline, file IOs go
//! through io_uring (or the thread pool).
//!
//! Semantics (docs/serve.md): a request overlapping a write or trim in
//! flight waits for it (requests are ordered per range); FLUSH goes to the
//! policy, then every backing store is fdatasync'ed before the reply, and a
//! FUA write or trim is followed by the same barrier; WRITE_ZEROES is
//! written as zeros; TRIM goes to the policy. A stop (SIGINT/SIGTERM or
//! `StopHandle::stop`) stops accepting and reading, finishes the requests
//! in flight, drains the policy (every dirty byte to the backing device),
//! fdatasyncs every store and writes the outputs.

mod conn;
mod error;
mod event_loop;
mod extents;
mod record;
mod report;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mio::net::{TcpListener, UnixListener};
use mio::{Interest, Poll, Token, Waker};
use tierlab_core::NS_PER_S;
use tierlab_core::ParamError;
use tierlab_core::metrics::{MetricsConfig, Recorder};
use tierlab_nbd::Export;
use tierlab_real::datapath::Core;
use tierlab_real::engine::{EngineKind, Io, Waiting};
use tierlab_real::error::BackendError;
use tierlab_stack::{StackConfig, StackContext};

pub use error::ServeError;
pub use report::{RequestCounts, ServeReport};
/// `ServeOptions::wait_poll_us`: the default, and the most accepted.
pub use tierlab_real::{WAIT_POLL_US_DEFAULT, WAIT_POLL_US_MAX};

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket at this path (created; removed when the server stops).
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl Listen {
    /// `--tcp` values: `PORT` (loopback), `HOST:PORT`, `[V6]:PORT`.
    /// The error names the flag (`--tcp`) and the forms allowed.
    pub fn parse_tcp(text: &str) -> Result<Listen, ServeError> {
        if let Ok(port) = text.parse::<u16>() {
            return Ok(Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], port))));
        }
        use std::net::ToSocketAddrs;
        let bad = || {
            ServeError::Option(ParamError::new(
                "--tcp",
                format!("{text:?}"),
                "PORT (loopback), HOST:PORT (e.g. 127.0.0.1:10809 or localhost:10809) or \
                 [V6]:PORT",
            ))
        };
        // A name (localhost:10809) resolves to its first address.
        text.to_socket_addrs()
            .map_err(|_| bad())?
            .next()
            .map(Listen::Tcp)
            .ok_or_else(bad)
    }
}

/// How to serve (the command line's flags).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The export's name (`NBD_OPT_LIST` lists it; "" selects it too).
    pub export_name: String,
    pub read_only: bool,
    /// Device IOs complete when the device models say (`[[devices]]` carry
    /// a model besides the backing store), as `tierlab emulate` does.
    pub model_timing: bool,
    /// Write summary.json, metrics and policy logs here, every
    /// `stats_interval_s` and at exit.
    pub out_dir: Option<PathBuf>,
    pub stats_interval_s: f64,
    /// Record every host IO as a native trace.
    pub record: Option<PathBuf>,
    pub io_engine: EngineKind,
    /// Device IOs in service at once (io_uring slots or threads); 0 inline.
    pub io_threads: usize,
    /// µs to look for requests and completions, yielding the CPU between
    /// looks, before sleeping in epoll; 0 sleeps at once. A server thread
    /// allowed one CPU only always sleeps at once.
    pub wait_poll_us: u32,
    /// Log connections and stop progress on stderr.
    pub verbose: bool,
    /// At a clean stop, write every cached byte back to the backing device
    /// even when the policy's cache survives a restart
    /// (`Policy::restarts_warm`, HSWD); without it such a cache is only
    /// flushed and comes back warm.
    pub write_back_on_stop: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            export_name: "tierlab".into(),
            read_only: false,
            model_timing: false,
            out_dir: None,
            stats_interval_s: 10.0,
            record: None,
            io_engine: EngineKind::Auto,
            io_threads: 32,
            wait_poll_us: tierlab_real::WAIT_POLL_US_DEFAULT,
            verbose: false,
            write_back_on_stop: false,
        }
    }
}

/// Largest READ/WRITE payload: the protocol's recommended 32 MiB.
pub const BLOCK_MAX_BYTES: u32 = 32 << 20;
/// NBD's minimum block size may be at most 64 KiB.
const BLOCK_MIN_LIMIT_BYTES: u64 = 64 << 10;

const LISTENER: Token = Token(0);
const IO_WAKE: Token = Token(1);
const SIGNALS: Token = Token(2);
const WAKER: Token = Token(3);
/// A timerfd for deadlines finer than epoll's millisecond timeout.
const TIMER: Token = Token(4);
/// Connections get tokens from here on.
const FIRST_CONN: usize = 16;

/// Stops a running server from another thread (or a signal handler's
/// stand-in): it finishes what is in flight, drains and writes outputs.
#[derive(Clone)]
pub struct StopHandle {
    flag: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// A bound server, ready to `run`.
pub struct Server {
    poll: Poll,
    listener: Option<Listener>,
    core: Core,
    export: Arc<[Export]>,
    uri: String,
    opts: ServeOptions,
    seed: u64,
    tier_names: Vec<String>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    signals: Option<OwnedFd>,
    /// Wakes the loop at the next deadline with nanosecond precision (a
    /// device model's completion 80 µs away must not wait a millisecond).
    timer: OwnedFd,
}

/// `map_err` for a failed system call of the event loop.
fn sys(call: &'static str) -> impl FnOnce(std::io::Error) -> ServeError {
    move |source| ServeError::Sys { call, source }
}

fn check_options(opts: &ServeOptions) -> Result<(), ServeError> {
    if !(opts.stats_interval_s.is_finite() && opts.stats_interval_s >= 0.001) {
        return Err(ServeError::Option(ParamError::new(
            "--stats-interval-s",
            opts.stats_interval_s,
            "a number of seconds ≥ 0.001",
        )));
    }
    ParamError::check_range("--io-threads", opts.io_threads, 0, 1024)
        .map_err(ServeError::Option)?;
    ParamError::check_range(
        "--wait-poll-us",
        opts.wait_poll_us,
        0,
        tierlab_real::WAIT_POLL_US_MAX,
    )
    .map_err(ServeError::Option)
}

impl Server {
    /// Builds the stack of `config` (relative paths against `base_dir`),
    /// opens its backing stores and the IO engine, and listens.
    pub fn bind(
        config: &StackConfig,
        base_dir: &Path,
        listen: &Listen,
        opts: ServeOptions,
    ) -> Result<Server, ServeError> {
        check_options(&opts)?;
        // A device table may carry a model (for --model-timing, `tierlab
        // sim`, `tierlab compare`) besides its backing store: the store is
        // opened from its real part.
        let real_tables: Vec<toml::Table> = config
            .devices
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let at = format!("devices[{i}]");
                let model = t.get("model").and_then(|v| v.as_str());
                if opts.model_timing || (model.is_some() && model != Some("raid")) {
                    tierlab_real::raid::real_device_table(t, &at).map_err(|e| {
                        let key = e.key_path();
                        let message = if opts.model_timing {
                            "--model-timing needs each device's `model` (its timing) and `path` \
                             (its backing store)"
                        } else {
                            "a `model` but no `path`: serving needs each device's backing \
                             store (`path`)"
                        };
                        ServeError::Backends(BackendError::key(key, message))
                    })
                } else {
                    Ok(t.clone())
                }
            })
            .collect::<Result<_, _>>()?;
        let backends = tierlab_real::open::open_backends(&real_tables, base_dir)?;
        Server::bind_with_backends(config, backends, listen, opts)
    }

    /// As `bind`, over backing stores the caller opened (one per
    /// `[[devices]]` table, in order): for tests that inject a store, e.g.
    /// one that models a volatile write cache to check FLUSH semantics.
    pub fn bind_with_backends(
        config: &StackConfig,
        backends: Vec<Box<dyn tierlab_real::backend::Backend>>,
        listen: &Listen,
        opts: ServeOptions,
    ) -> Result<Server, ServeError> {
        check_options(&opts)?;
        if backends.len() != config.devices.len() {
            return Err(ServeError::StoreCount {
                stores: backends.len(),
                devices: config.devices.len(),
            });
        }
        let names = config.device_names();
        let capacities: Vec<u64> = backends.iter().map(|b| b.capacity_bytes()).collect();
        let ctx = StackContext {
            devices: config
                .devices
                .iter()
                .zip(&names)
                .zip(&capacities)
                .map(
                    |((table, name), &capacity_bytes)| tierlab_stack::DeviceSpec {
                        name: name.clone(),
                        capacity_bytes,
                        table: table.clone(),
                    },
                )
                .collect(),
            tenants: Vec::new(),
        };
        let policy = tierlab_real::open::build_real_policy(&config.policy, &ctx)?;
        let align = policy.required_alignment_bytes().max(1);
        if !align.is_power_of_two() || align > BLOCK_MIN_LIMIT_BYTES {
            return Err(ServeError::BlockSize {
                policy: policy.name().to_string(),
                align_bytes: align,
            });
        }
        let block_min = align.max(512) as u32;
        let volume = tierlab_stack::volume_bytes(&config.policy, &ctx)?;
        let size_bytes = volume / block_min as u64 * block_min as u64;
        if size_bytes == 0 {
            return Err(ServeError::VolumeTooSmall {
                volume_bytes: volume,
                block_bytes: block_min,
            });
        }
        let tier_names = policy.tier_names();
        let export = Export {
            name: opts.export_name.clone(),
            description: format!(
                "tierlab {} over {}",
                policy.name(),
                backends
                    .iter()
                    .map(|b| b.describe())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            size_bytes,
            read_only: opts.read_only,
            // Every FLUSH (and FUA) goes to the policy of the one shared
            // stack, then fdatasyncs every backing store, so a flush on one
            // connection covers writes acknowledged on all of them — where
            // the policy's FLUSH makes data durable at all
            // (`Policy::flush_is_durable`: not ATSMF's with
            // flush_writes_back = false).
            can_multi_conn: policy.flush_is_durable(),
            block_min_bytes: block_min,
            block_preferred_bytes: block_min.max(4096),
            block_max_bytes: BLOCK_MAX_BYTES,
            meta_contexts: vec!["base:allocation".into(), "tierlab:tier".into()],
        };
        export.validate().map_err(ServeError::Export)?;
        let interval_ns = (opts.stats_interval_s * NS_PER_S as f64).round() as u64;
        let recorder = Recorder::new(MetricsConfig {
            interval_ns,
            device_names: names.clone(),
            tier_names: tier_names.clone(),
            tenants: 1,
            timeline: false,
            ..MetricsConfig::default()
        })
        .map_err(ServeError::Metrics)?;
        let backends = Arc::new(backends);
        // The server sleeps in epoll: the engine bumps an eventfd (`wake_fd`).
        let io = Io::new(
            Arc::clone(&backends),
            opts.io_engine,
            opts.io_threads,
            Waiting::Epoll,
        )?;
        let mut core = Core::new(policy, backends, names, io, recorder, interval_ns);
        if opts.model_timing {
            let models = tierlab_stack::devices::build_models(&config.devices, config.seed)?;
            core = core.with_models(models)?;
        }
        // Recover the policy's persistent state from the stores (or format).
        core.open_policy()?;

        let poll = Poll::new().map_err(sys("epoll"))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(sys("epoll waker"))?);
        if let Some(fd) = core.io.wake_fd() {
            poll.registry()
                .register(&mut mio::unix::SourceFd(&fd), IO_WAKE, Interest::READABLE)
                .map_err(sys("epoll: the IO engine's descriptor"))?;
        }
        // SAFETY: a new descriptor we own, or -1.
        let timer = unsafe {
            let fd = libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            );
            if fd < 0 {
                return Err(sys("timerfd")(std::io::Error::last_os_error()));
            }
            OwnedFd::from_raw_fd(fd)
        };
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&timer.as_raw_fd()),
                TIMER,
                Interest::READABLE,
            )
            .map_err(sys("epoll: timerfd"))?;
        let (mut listener, uri) = match listen {
            Listen::Unix(path) => {
                if path.exists() {
                    // A socket left by a server that was killed: replace
                    // it; anything else is the user's and stays.
                    use std::os::unix::fs::FileTypeExt;
                    let is_socket = std::fs::symlink_metadata(path)
                        .map(|m| m.file_type().is_socket())
                        .unwrap_or(false);
                    if !is_socket {
                        return Err(ServeError::SocketPath {
                            path: path.clone(),
                            problem: "exists and is not a socket; give a new path",
                        });
                    }
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        return Err(ServeError::SocketPath {
                            path: path.clone(),
                            problem: "a server is already listening there",
                        });
                    }
                    std::fs::remove_file(path).map_err(|source| ServeError::File {
                        flag: "--unix",
                        path: path.clone(),
                        action: "cannot replace",
                        source,
                    })?;
                }
                let l = UnixListener::bind(path).map_err(|source| ServeError::File {
                    flag: "--unix",
                    path: path.clone(),
                    action: "cannot listen",
                    source,
                })?;
                let uri = format!("nbd+unix:///{}?socket={}", opts.export_name, path.display());
                (Listener::Unix(l, path.clone()), uri)
            }
            Listen::Tcp(addr) => {
                let tcp = |action| {
                    move |source| ServeError::Tcp {
                        address: *addr,
                        action,
                        source,
                    }
                };
                let l = TcpListener::bind(*addr).map_err(tcp("cannot listen"))?;
                let local = l
                    .local_addr()
                    .map_err(tcp("cannot read the address bound"))?;
                let uri = format!("nbd://{local}/{}", opts.export_name);
                (Listener::Tcp(l), uri)
            }
        };
        let source: &mut dyn mio::event::Source = match &mut listener {
            Listener::Tcp(l) => l,
            Listener::Unix(l, _) => l,
        };
        poll.registry()
            .register(source, LISTENER, Interest::READABLE)
            .map_err(sys("epoll: the listening socket"))?;
        Ok(Server {
            poll,
            listener: Some(listener),
            core,
            export: Arc::from(vec![export]),
            uri,
            opts,
            seed: config.seed,
            tier_names,
            stop: Arc::new(AtomicBool::new(false)),
            waker,
            signals: None,
            timer,
        })
    }

    /// The NBD URI clients connect to (`nbd+unix:///NAME?socket=PATH`,
    /// `nbd://HOST:PORT/NAME`).
    pub fn uri(&self) -> &str {
        &self.uri
    }

    pub fn export(&self) -> &Export {
        &self.export[0]
    }

    /// The policy's tier names: `tierlab:tier` flags index them.
    pub fn tier_names(&self) -> &[String] {
        &self.tier_names
    }

    /// What backs each device, and the IO engine.
    pub fn describe_backends(&self) -> Vec<String> {
        self.core.backends.iter().map(|b| b.describe()).collect()
    }

    pub fn io_engine(&self) -> &str {
        &self.core.io.description
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            flag: Arc::clone(&self.stop),
            waker: Arc::clone(&self.waker),
        }
    }

    /// Stops on SIGINT or SIGTERM (a second one while draining aborts).
    /// SIGINT/SIGTERM must be blocked before `bind` starts the IO threads
    /// (`tierlab_real::signals::BlockedStopSignals`).
    pub fn watch_signals(&mut self) -> Result<(), ServeError> {
        // SAFETY: a local sigset and a new descriptor we own.
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
            if fd < 0 {
                return Err(sys("signalfd")(std::io::Error::last_os_error()));
            }
            OwnedFd::from_raw_fd(fd)
        };
        self.poll
            .registry()
            .register(
                &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                SIGNALS,
                Interest::READABLE,
            )
            .map_err(sys("epoll: signalfd"))?;
        self.signals = Some(fd);
        Ok(())
    }

    /// Serves until stopped; then drains the policy, syncs every store and
    /// writes the outputs.
    pub fn run(self) -> Result<ServeReport, ServeError> {
        event_loop::run(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_binds_loopback_unless_a_host_is_given() {
        assert_eq!(
            Listen::parse_tcp("10809").unwrap(),
            Listen::Tcp("127.0.0.1:10809".parse().unwrap())
        );
        assert_eq!(
            Listen::parse_tcp("0.0.0.0:10809").unwrap(),
            Listen::Tcp("0.0.0.0:10809".parse().unwrap())
        );
        assert_eq!(
            Listen::parse_tcp("[::1]:9").unwrap(),
            Listen::Tcp("[::1]:9".parse().unwrap())
        );
        match Listen::parse_tcp("localhost:10809").unwrap() {
            Listen::Tcp(a) => assert!(a.ip().is_loopback() && a.port() == 10809, "{a}"),
            other => panic!("{other:?}"),
        }
        let e = Listen::parse_tcp("localhost:x").unwrap_err();
        let ServeError::Option(p) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            (p.key(), p.found.as_str()),
            ("--tcp".into(), "\"localhost:x\"")
        );
        let e = e.to_string();
        assert!(
            e.contains("`--tcp`") && e.contains("\"localhost:x\"") && e.contains("HOST:PORT"),
            "{e}"
        );
    }
}
