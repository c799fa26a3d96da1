//! Servers for the debuginfod client's tests: a real `debuginfod` (Debian's package) on a free local port
//! serving a directory, and a tiny hand-written HTTP server that answers every request with fixed bytes
//! (a body cut short, a file with the wrong build-id), then closes, stalls, trickles or repeats itself
//! without end. Each is stopped when dropped, on every path out of a test, panics included.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::skip;

/// A running `debuginfod -F` over one directory, killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
    /// Its database and log live here.
    pub dir: PathBuf,
}

/// A free TCP port on 127.0.0.1 (free when asked; a server started right after gets it in practice).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

impl Server {
    /// Starts debuginfod serving the ELF files under `serve`, and waits until it has scanned at least
    /// `files` of them. `None` (after a SKIP line) when debuginfod is not installed.
    pub fn start(serve: &Path, work: &Path, files: u64) -> Option<Server> {
        if Command::new("debuginfod")
            .arg("--version")
            .output()
            .map_or(true, |o| !o.status.success())
        {
            skip("debuginfod not found (Debian package `debuginfod`)");
            return None;
        }
        std::fs::create_dir_all(work).unwrap();
        for attempt in 0..5 {
            let port = free_port();
            let log =
                std::fs::File::create(work.join(format!("debuginfod-{attempt}.log"))).unwrap();
            let child = Command::new("debuginfod")
                .args(["-p", &port.to_string(), "-F", "-t", "0", "-g", "0", "-d"])
                .arg(work.join(format!("db-{attempt}.sqlite")))
                .arg(serve)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start debuginfod");
            let mut server = Server {
                child,
                url: format!("http://127.0.0.1:{port}"),
                dir: work.to_path_buf(),
            };
            if server.wait_scanned(files, Duration::from_secs(30)) {
                return Some(server);
            }
            // Most likely the port was taken between asking and binding: try another.
            let _ = server.child.kill();
        }
        panic!(
            "debuginfod did not start and scan {}; logs in {}",
            serve.display(),
            work.display()
        );
    }

    /// Polls `/metrics` until the scanner has done `files` files and has nothing queued.
    fn wait_scanned(&mut self, files: u64, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Some(m) = get(&self.url, "/metrics") {
                let value = |key: &str| {
                    m.lines()
                        .find_map(|l| l.strip_prefix(key))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                };
                let scanned = value("scanned_files_total{source=\"file\"}").unwrap_or(0.0);
                let pending = value("thread_work_pending{role=\"scan\"}").unwrap_or(1.0);
                if scanned >= files as f64 && pending == 0.0 {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stops the server now (a test that proves no request is made stops it first).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The body of a plain `GET` over HTTP/1.0, or `None` on any failure.
fn get(base: &str, path: &str) -> Option<String> {
    let hostport = base.strip_prefix("http://")?;
    let mut s = TcpStream::connect(hostport).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some(body.to_string())
}

/// What a [`Canned`] server does after sending its fixed bytes.
#[derive(Clone)]
pub enum Then {
    /// Closes the connection.
    Close,
    /// Keeps the connection open, silent, until the server is dropped: a server that stalls.
    Hold,
    /// Sends these bytes one at a time, this far apart, then holds: a server that trickles.
    Trickle(Vec<u8>, Duration),
    /// Sends these bytes again and again until the client goes away or the server is dropped: a body
    /// without end.
    Repeat(Vec<u8>),
}

/// A one-response-fits-all HTTP server on a free local port: every request gets `response` (status line,
/// headers and body as given), then what [`Then`] says. Counts the requests it saw.
pub struct Canned {
    pub url: String,
    pub requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    port: u16,
}

impl Canned {
    pub fn start(response: Vec<u8>) -> Canned {
        Canned::start_then(response, Then::Close)
    }

    /// Like [`Canned::start`], but after the response the connection stays open, silent, until the
    /// server is dropped: a server that stalls mid-transfer.
    pub fn start_holding(response: Vec<u8>, hold: bool) -> Canned {
        Canned::start_then(response, if hold { Then::Hold } else { Then::Close })
    }

    /// Sends `response`, then does what `then` says; each connection is served on its own thread, so a
    /// held one does not keep the next client waiting.
    pub fn start_then(response: Vec<u8>, then: Then) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut served = Vec::new();
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (r, s, response, then) = (r.clone(), s.clone(), response.clone(), then.clone());
                served.push(std::thread::spawn(move || {
                    serve(conn, &r, &s, &response, &then)
                }));
            }
            for t in served {
                let _ = t.join();
            }
        });
        Canned {
            url: format!("http://127.0.0.1:{port}"),
            requests,
            stop,
            thread: Some(thread),
            port,
        }
    }

    /// `200 OK` with `Content-Length: claimed` and only `body` after it.
    pub fn ok(body: &[u8], claimed: usize) -> Vec<u8> {
        let mut v = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {claimed}\r\n\
             Connection: close\r\n\r\n"
        )
        .into_bytes();
        v.extend_from_slice(body);
        v
    }
}

/// One connection of a [`Canned`] server.
fn serve(
    mut conn: TcpStream,
    requests: &AtomicUsize,
    stop: &AtomicBool,
    response: &[u8],
    then: &Then,
) {
    // Read the request head, then answer: a `Content-Length` larger than what follows is a connection
    // closed halfway.
    let Ok(head) = conn.try_clone() else { return };
    let mut reader = BufReader::new(head);
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        if line == "\r\n" {
            break;
        }
        line.clear();
    }
    requests.fetch_add(1, Ordering::SeqCst);
    let _ = conn.write_all(response);
    let _ = conn.flush();
    let hold = |stop: &AtomicBool| {
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    match then {
        Then::Close => {}
        Then::Hold => hold(stop),
        Then::Trickle(bytes, every) => {
            for b in bytes {
                if stop.load(Ordering::SeqCst) || conn.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(*every);
            }
            hold(stop);
        }
        Then::Repeat(bytes) => {
            while !stop.load(Ordering::SeqCst) && conn.write_all(bytes).is_ok() {}
        }
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
