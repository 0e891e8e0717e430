//! The history of a job's runs: each run's scale-free figures stored in a database, a rule that
//! tells a regression from noise, and trends per run and by hour of day.
//!
//! Storage is SQLite (a file, the default) or PostgreSQL (`postgres://...`, for runners writing
//! at once to one database), with the same schema, versioned in `schema_version` and migrated
//! forward in a transaction by whoever opens the database first:
//!
//! ```sql
//! schema_version(version)                                  -- one row
//! runs(id, job, added_at, started_at, hour, program, logs) -- one row per run added
//! metrics(run_id, scope, name, value)                      -- its figures
//! ```
//!
//! `scope` is `<program>: run` for a run's figures over its locks, `<program>: <kind> <site>`
//! for the objects created at a site (the keys of a baseline, see [`super::baseline`]).
//! Besides the scale-free figures the rule judges, the run scope keeps what people follow over
//! time ([`TREND_ONLY`]): wait totals, lost parallelism and idle CPU time, the thread-state
//! totals and the duration, summed over the program's processes; they move with the machine's
//! speed and load, so they are shown, not judged.
//!
//! The regression rule ([`judge`]): a figure of the new run is compared with the same figure
//! over the job's last `window` runs (an object absent from a run counts 0 there: only
//! contended objects are stored). With `m` their median and `s = 1.4826 × MAD` (the median
//! absolute deviation, scaled to be a standard deviation for normal noise), the run alerts when
//! the figure is above `m + 4·s` *and* above `m` by more than an absolute floor (5 points for a
//! ratio of counts, 15 points for a share of time, 1 for a highwater, 0.5 for deadlocks and
//! inversions) *and* by more than 25% of `m`. There must be at least 5 earlier runs.
//! Median and MAD are not pulled by the odd slow run the way a mean and a standard deviation
//! are, and the two floors keep a figure that never moves (MAD 0) from alerting on a tiny step.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use std::time::Duration;

use super::baseline::{self, Scaled};
use super::cli::{DbArgs, HistoryCommand};
use super::metrics::Figures;

/// Reads a file the user named (a regular file, or a pipe: `--baseline <(...)`) as text, at
/// most `max` bytes of it.
pub fn read_small(path: &Path, max: u64) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_dir() {
        return Err("a directory, not a file".into());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

/// The schema version this analyzer writes.
pub const SCHEMA_VERSION: i64 = 1;
/// Earlier runs needed before a run is judged.
pub const MIN_HISTORY: usize = 5;
/// How many scaled MADs above the median a figure must be.
pub const K: f64 = 4.0;
/// Relative change needed besides.
pub const MIN_RELATIVE: f64 = 0.25;

/// The default database: `$WAITSHIM_HISTORY`, else `.waitshim/history.sqlite` in the working
/// directory (inside a CI checkout, where a cache can keep it).
pub fn default_db() -> String {
    std::env::var(waitshim_format::contract::env::HISTORY)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ".waitshim/history.sqlite".to_string())
}

/// One stored run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredRun {
    pub id: i64,
    pub added_at: i64,
    pub started_at: i64,
    pub hour: i64,
    pub program: String,
    pub logs: i64,
    pub metrics: BTreeMap<(String, String), f64>,
}

/// The migrations, in order: version N is reached by running `MIGRATIONS[N-1]`. The SQL is the
/// common subset of SQLite and PostgreSQL, but for the id column (`{ID}`).
const MIGRATIONS: &[&str] = &["
CREATE TABLE runs (
    id {ID},
    job TEXT NOT NULL,
    added_at BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    hour INTEGER NOT NULL,
    program TEXT NOT NULL,
    logs INTEGER NOT NULL
);
CREATE INDEX runs_by_job ON runs (job, id);
CREATE TABLE metrics (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, scope, name)
);
"];

/// A database holding histories.
pub trait Store {
    /// Adds a run; returns its id.
    fn add(&mut self, job: &str, run: &StoredRun) -> Result<i64, String>;
    /// The job's last `n` runs, oldest first.
    fn last(&mut self, job: &str, n: usize) -> Result<Vec<StoredRun>, String>;
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

/// What a command does with a history database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads it only: a database that does not exist is an error, and nothing is created.
    Read,
    /// Adds runs: a SQLite file that does not exist is created, with its directory.
    Write,
}

/// How long a PostgreSQL server is waited for when the user does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The keywords of a libpq key=value connection string (`host=db user=ci dbname=waitshim`).
const PG_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// Whether `db` names a PostgreSQL database (a URL or a key=value string) rather than a file.
pub fn is_postgres(db: &str) -> bool {
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return true;
    }
    let first = db.trim_start().split('=').next().unwrap_or("");
    db.contains('=') && PG_KEYWORDS.contains(&first.trim())
}

/// `db` with every password in it replaced by `***`: the password of a URL's user
/// (`postgres://u:***@host`) and the value of a `password=` key (a key=value string, a URL's
/// query). Every message naming a database goes through it.
pub fn redact(db: &str) -> String {
    let mut out = String::with_capacity(db.len());
    let mut rest = db;
    // URLs: scheme://user:password@host...
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                let userinfo = &authority[..userinfo_end];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..=colon]);
                        out.push_str("***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[userinfo_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    redact_password_keys(&out)
}

/// Replaces the value of each `password=` key (at the start, after a space, `?` or `&`;
/// the value quoted with `'` or ending at a space or `&`) by `***`.
fn redact_password_keys(s: &str) -> String {
    const KEY: &str = "password";
    let lower = s.to_ascii_lowercase();
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(found) = lower[i..].find(KEY) {
        let k = i + found;
        let starts_key = k == 0 || matches!(bytes[k - 1], b' ' | b'\t' | b'\n' | b'?' | b'&');
        let mut j = k + KEY.len();
        while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t') {
            j += 1;
        }
        if !starts_key || j >= bytes.len() || bytes[j] != b'=' {
            out.push_str(&s[i..k + KEY.len()]);
            i = k + KEY.len();
            continue;
        }
        j += 1;
        while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t') {
            j += 1;
        }
        out.push_str(&s[i..j]);
        let mut end = j;
        if end < bytes.len() && bytes[end] == b'\'' {
            end += 1;
            while end < bytes.len() && bytes[end] != b'\'' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            end = (end + 1).min(bytes.len());
        } else {
            while end < bytes.len() && !bytes[end].is_ascii_whitespace() && bytes[end] != b'&' {
                end += 1;
            }
        }
        out.push_str("***");
        i = end;
    }
    out.push_str(&s[i..]);
    out
}

/// Opens (and migrates) the database `db` names; with [`Access::Write`] a SQLite file that
/// does not exist is created.
pub fn open(db: &DbArgs, access: Access) -> Result<Box<dyn Store>, String> {
    let name = db.db.clone().unwrap_or_else(default_db);
    let shown = redact(&name);
    if name.is_empty() {
        Err("--db is an empty string: give a SQLite file or a postgres:// URL".into())
    } else if is_postgres(&name) {
        match Pg::open(&name, db) {
            Ok(p) => Ok(Box::new(p)),
            Err(e) => Err(format!("{shown}: {}", hide_password(&name, &e))),
        }
    } else {
        match Lite::open(Path::new(&name), access) {
            Ok(l) => Ok(Box::new(l)),
            Err(e) => Err(redact(&e)),
        }
    }
}

/// `message` with the password `db` holds (a URL's, or a key=value string's) taken out, wherever
/// a library quoted it; short passwords are left to [`redact`]'s patterns, as replacing one or
/// two letters everywhere would garble the message.
fn hide_password(db: &str, message: &str) -> String {
    let message = redact(message);
    if !is_postgres(db) {
        return message;
    }
    let password = db
        .parse::<tokio_postgres::Config>()
        .ok()
        .and_then(|c| c.get_password().map(<[u8]>::to_vec))
        .and_then(|p| String::from_utf8(p).ok());
    match password {
        Some(p) if p.len() >= 4 => message.replace(&p, "***"),
        _ => message,
    }
}

/// What the path of a SQLite database is, when not a regular file.
fn not_a_file(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Refuses, before SQLite opens anything (it would create `-journal` files beside it), a path
/// that is not a regular file, or, for reading, that does not exist; for writing, creates the
/// directory of a file that does not exist yet.
fn check_sqlite_path(path: &Path, access: Access) -> Result<(), String> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(meta) => match not_a_file(&meta) {
            None => Ok(()),
            Some(what) => Err(format!(
                "{shown} is {what}, not a history database (a SQLite file): nothing was written"
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(format!(
                    "{shown} is a symbolic link to nothing: nothing was written"
                ));
            }
            if access == Access::Read {
                return Err(format!(
                    "no history database at {shown} (nothing was created: `history add` creates it)"
                ));
            }
            if path.file_name().is_none() || path.as_os_str().to_string_lossy().ends_with('/') {
                return Err(format!(
                    "{shown} names a directory, not a history database file"
                ));
            }
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            Ok(())
        }
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

struct Lite {
    conn: rusqlite::Connection,
}

fn lite_err(e: rusqlite::Error) -> String {
    format!("SQLite: {e}")
}

impl Lite {
    fn open(path: &Path, access: Access) -> Result<Lite, String> {
        // `:memory:` would keep nothing (and it is no file's name to SQLite).
        if path.as_os_str() == ":memory:" {
            return Err(":memory: keeps nothing once the command ends: give a file".into());
        }
        check_sqlite_path(path, access)?;
        let at = |e: rusqlite::Error| format!("{}: {}", path.display(), lite_err(e));
        // No SQLITE_OPEN_URI: `file:...` is a file's name, as the check above read it.
        let mut flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if access == Access::Write {
            flags |= rusqlite::OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = rusqlite::Connection::open_with_flags(path, flags).map_err(at)?;
        // Concurrent writers wait for each other instead of failing.
        conn.busy_timeout(std::time::Duration::from_secs(60))
            .map_err(at)?;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(at)?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            .map_err(at)?;
        let v: Option<i64> = tx
            .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
            .map_err(at)?;
        let v = v.unwrap_or(0);
        if v > SCHEMA_VERSION {
            return Err(format!(
                "{}: schema version {v} is newer than this analyzer's ({SCHEMA_VERSION})",
                path.display()
            ));
        }
        for (i, m) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(v).unwrap_or(0))
        {
            tx.execute_batch(&m.replace("{ID}", "INTEGER PRIMARY KEY AUTOINCREMENT"))
                .map_err(at)?;
            tx.execute("DELETE FROM schema_version", []).map_err(at)?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                [i as i64 + 1],
            )
            .map_err(at)?;
        }
        tx.commit().map_err(at)?;
        Ok(Lite { conn })
    }
}

impl Store for Lite {
    fn add(&mut self, job: &str, run: &StoredRun) -> Result<i64, String> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(lite_err)?;
        tx.execute(
            "INSERT INTO runs (job, added_at, started_at, hour, program, logs) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![job, run.added_at, run.started_at, run.hour, run.program, run.logs],
        )
        .map_err(lite_err)?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx
                .prepare("INSERT INTO metrics (run_id, scope, name, value) VALUES (?1, ?2, ?3, ?4)")
                .map_err(lite_err)?;
            for ((scope, name), v) in &run.metrics {
                st.execute(rusqlite::params![id, scope, name, v])
                    .map_err(lite_err)?;
            }
        }
        tx.commit().map_err(lite_err)?;
        Ok(id)
    }

    fn last(&mut self, job: &str, n: usize) -> Result<Vec<StoredRun>, String> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let mut st = self
            .conn
            .prepare(
                "SELECT id, added_at, started_at, hour, program, logs FROM runs WHERE job = ?1 ORDER BY id DESC LIMIT ?2",
            )
            .map_err(lite_err)?;
        let mut runs: Vec<StoredRun> = st
            .query_map(rusqlite::params![job, n], |r| {
                Ok(StoredRun {
                    id: r.get(0)?,
                    added_at: r.get(1)?,
                    started_at: r.get(2)?,
                    hour: r.get(3)?,
                    program: r.get(4)?,
                    logs: r.get(5)?,
                    metrics: BTreeMap::new(),
                })
            })
            .map_err(lite_err)?
            .collect::<Result<_, _>>()
            .map_err(lite_err)?;
        runs.reverse();
        let mut st = self
            .conn
            .prepare("SELECT scope, name, value FROM metrics WHERE run_id = ?1")
            .map_err(lite_err)?;
        for run in &mut runs {
            let rows = st
                .query_map([run.id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, f64>(2)?,
                    ))
                })
                .map_err(lite_err)?;
            for row in rows {
                let (s, n, v) = row.map_err(lite_err)?;
                run.metrics.insert((s, n), v);
            }
        }
        Ok(runs)
    }
}

/// A PostgreSQL connection driven by a runtime of its own, on this thread: every exchange with
/// the server is bounded in time, as a server that accepted the connection and never answers
/// would otherwise hold the command for ever.
struct Pg {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    statement_timeout: Duration,
}

fn pg_err(e: tokio_postgres::Error) -> String {
    // The error's own text is only "db error" for what the server said: say what it said.
    match e.as_db_error() {
        Some(db) => format!("PostgreSQL: {}: {}", db.severity(), db.message()),
        None => match std::error::Error::source(&e) {
            Some(src) => format!("PostgreSQL: {e}: {src}"),
            None => format!("PostgreSQL: {e}"),
        },
    }
}

/// `10s`, `1.5s`, `500ms`.
fn show_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// `f`, a statement's exchange with the server, given at most `limit`.
async fn within<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.map_err(pg_err),
        Err(_) => Err(format!(
            "PostgreSQL: the server did not answer a statement within {} (--statement-timeout)",
            show_duration(limit)
        )),
    }
}

impl Pg {
    fn open(conn: &str, db: &DbArgs) -> Result<Pg, String> {
        let mut config: tokio_postgres::Config = conn
            .parse()
            .map_err(|e| format!("not a PostgreSQL connection string: {e}"))?;
        let connect_timeout = db
            .connect_timeout
            .or_else(|| config.get_connect_timeout().copied())
            .unwrap_or(DEFAULT_TIMEOUT);
        let statement_timeout = db.statement_timeout.unwrap_or(DEFAULT_TIMEOUT);
        config.connect_timeout(connect_timeout);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the PostgreSQL client: {e}"))?;
        let (client, connection) = runtime
            .block_on(async {
                tokio::time::timeout(connect_timeout, config.connect(tokio_postgres::NoTls)).await
            })
            .map_err(|_| {
                format!(
                    "PostgreSQL: no connection within {}: the server did not accept it or did not answer (--connect-timeout)",
                    show_duration(connect_timeout)
                )
            })?
            .map_err(pg_err)?;
        // Polled whenever the client waits for an answer (this runtime runs only then).
        runtime.spawn(connection);
        let mut pg = Pg {
            runtime,
            client,
            statement_timeout,
        };
        pg.migrate()?;
        Ok(pg)
    }

    fn migrate(&mut self) -> Result<(), String> {
        let limit = self.statement_timeout;
        let client = &mut self.client;
        self.runtime.block_on(async move {
            // The server cancels a statement at the same limit, for when this client is gone.
            within(
                limit,
                client.batch_execute(&format!(
                    "SET statement_timeout = {}",
                    limit.as_millis().max(1)
                )),
            )
            .await?;
            let tx = within(limit, client.transaction()).await?;
            // One migrator at a time: the others wait here, then find the schema done.
            within(
                limit,
                tx.execute("SELECT pg_advisory_xact_lock(7316501016)", &[]),
            )
            .await?;
            within(
                limit,
                tx.batch_execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
                ),
            )
            .await?;
            let v: Option<i32> = within(
                limit,
                tx.query_one("SELECT MAX(version) FROM schema_version", &[]),
            )
            .await?
            .get(0);
            let v = i64::from(v.unwrap_or(0));
            if v > SCHEMA_VERSION {
                return Err(format!(
                    "schema version {v} is newer than this analyzer's ({SCHEMA_VERSION})"
                ));
            }
            for (i, m) in MIGRATIONS
                .iter()
                .enumerate()
                .skip(usize::try_from(v).unwrap_or(0))
            {
                within(
                    limit,
                    tx.batch_execute(&m.replace("{ID}", "BIGSERIAL PRIMARY KEY")),
                )
                .await?;
                within(limit, tx.execute("DELETE FROM schema_version", &[])).await?;
                within(
                    limit,
                    tx.execute(
                        "INSERT INTO schema_version (version) VALUES ($1)",
                        &[&(i as i32 + 1)],
                    ),
                )
                .await?;
            }
            within(limit, tx.commit()).await
        })
    }
}

impl Store for Pg {
    fn add(&mut self, job: &str, run: &StoredRun) -> Result<i64, String> {
        let limit = self.statement_timeout;
        let client = &mut self.client;
        self.runtime.block_on(async move {
            let tx = within(limit, client.transaction()).await?;
            let hour = i32::try_from(run.hour).unwrap_or(0);
            let logs = i32::try_from(run.logs).unwrap_or(i32::MAX);
            let id: i64 = within(
                limit,
                tx.query_one(
                    "INSERT INTO runs (job, added_at, started_at, hour, program, logs) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                    &[&job, &run.added_at, &run.started_at, &hour, &run.program, &logs],
                ),
            )
            .await?
            .get(0);
            let st = within(
                limit,
                tx.prepare("INSERT INTO metrics (run_id, scope, name, value) VALUES ($1, $2, $3, $4)"),
            )
            .await?;
            for ((scope, name), v) in &run.metrics {
                within(limit, tx.execute(&st, &[&id, scope, name, v])).await?;
            }
            within(limit, tx.commit()).await?;
            Ok(id)
        })
    }

    fn last(&mut self, job: &str, n: usize) -> Result<Vec<StoredRun>, String> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let limit = self.statement_timeout;
        let client = &mut self.client;
        self.runtime.block_on(async move {
            let rows = within(
                limit,
                client.query(
                    "SELECT id, added_at, started_at, hour, program, logs FROM runs WHERE job = $1 ORDER BY id DESC LIMIT $2",
                    &[&job, &n],
                ),
            )
            .await?;
            let mut runs: Vec<StoredRun> = rows
                .iter()
                .map(|r| StoredRun {
                    id: r.get(0),
                    added_at: r.get(1),
                    started_at: r.get(2),
                    hour: i64::from(r.get::<_, i32>(3)),
                    program: r.get(4),
                    logs: i64::from(r.get::<_, i32>(5)),
                    metrics: BTreeMap::new(),
                })
                .collect();
            runs.reverse();
            let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
            let rows = within(
                limit,
                client.query(
                    "SELECT run_id, scope, name, value FROM metrics WHERE run_id = ANY($1)",
                    &[&ids],
                ),
            )
            .await?;
            for r in rows {
                let id: i64 = r.get(0);
                if let Some(run) = runs.iter_mut().find(|x| x.id == id) {
                    run.metrics.insert((r.get(1), r.get(2)), r.get(3));
                }
            }
            Ok(runs)
        })
    }
}

/// Figures stored for trends only: absolute times and counts, which move with the machine the
/// run happened on. [`judge`] leaves them out.
pub const TREND_ONLY: &[&str] = &[
    "duration_ns",
    "threads",
    "processes",
    "wait_total_ns",
    "wait_all_ns",
    "lost_parallelism_ns",
    "idle_cpu_ns",
    "idle_cpu",
    "running_ns",
    "runnable_ns",
    "tracked_wait_ns",
    "blocked_ns",
];

/// The absolute figures of a program's logs, summed (see [`TREND_ONLY`]).
fn totals(figs: &[&Figures]) -> Vec<(&'static str, f64)> {
    let sum = |f: &dyn Fn(&Figures) -> u64| -> f64 {
        figs.iter().map(|x| f(x)).fold(0u64, u64::saturating_add) as f64
    };
    let mut out = vec![
        ("processes", figs.len() as f64),
        ("duration_ns", sum(&|f| f.duration_ns)),
        ("threads", sum(&|f| f.threads)),
        ("wait_total_ns", sum(&|f| f.locks().wait_ns)),
        ("wait_all_ns", sum(&|f| f.wait_all_ns())),
    ];
    if figs.iter().any(|f| f.sampled_lost.is_some()) {
        out.push((
            "lost_parallelism_ns",
            sum(&|f| f.sampled_lost.as_ref().map_or(0, |l| l.lost_ns)),
        ));
    }
    if figs.iter().any(|f| f.states.is_some()) {
        let st = |g: fn(&super::metrics::StateTotals) -> u64| {
            move |f: &Figures| f.states.as_ref().map_or(0, g)
        };
        // The CPUs are looked at from the sampler's second look on: a very short run has none.
        let idle = sum(&st(|t| t.idle_cpu_ns));
        let capacity = sum(&st(|t| t.cpu_capacity_ns));
        if capacity > 0.0 {
            out.push(("idle_cpu_ns", idle));
            out.push(("idle_cpu", idle / capacity));
        }
        out.push(("running_ns", sum(&st(|t| t.running_ns))));
        out.push(("runnable_ns", sum(&st(|t| t.runnable_ns))));
        out.push(("tracked_wait_ns", sum(&st(|t| t.tracked_wait_ns))));
        out.push(("blocked_ns", sum(&st(|t| t.blocked_ns))));
    }
    out
}

fn put(metrics: &mut BTreeMap<(String, String), f64>, scope: &str, s: &Scaled) {
    let mut set = |name: &str, v: f64| {
        metrics.insert((scope.to_string(), name.to_string()), v);
    };
    set("contended_ratio", s.contended_ratio);
    set("waits_per_acquisition", s.waits_per_acquisition);
    if let Some(w) = s.wait_share {
        set("wait_share", w);
    }
    set("hwm", s.hwm as f64);
    if let Some(l) = s.lost_parallelism {
        set("lost_parallelism", l);
    }
}

/// The row a run's logs make.
pub fn stored_run(figs: &[Figures]) -> StoredRun {
    let b = baseline::build(figs);
    let mut metrics = BTreeMap::new();
    for (program, p) in &b.programs {
        put(&mut metrics, &format!("{program}: run"), &p.run);
        metrics.insert(
            (format!("{program}: run"), "deadlocks".into()),
            p.deadlocks as f64,
        );
        metrics.insert(
            (format!("{program}: run"), "inversions".into()),
            p.inversions.len() as f64,
        );
        for (key, s) in &p.objects {
            put(&mut metrics, &format!("{program}: {key}"), s);
        }
        let mine: Vec<&Figures> = figs
            .iter()
            .filter(|f| f.program_name() == program)
            .collect();
        for (name, v) in totals(&mine) {
            metrics.insert((format!("{program}: run"), name.to_string()), v);
        }
    }
    let started = figs
        .iter()
        .map(|f| f.started_unix_s)
        .filter(|&s| s > 0)
        .min()
        .unwrap_or_else(now_unix);
    StoredRun {
        id: 0,
        added_at: now_unix(),
        started_at: started,
        hour: started.rem_euclid(86_400) / 3_600,
        program: b.programs.keys().cloned().collect::<Vec<_>>().join(","),
        logs: figs.len() as i64,
        metrics,
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A figure that moved.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub scope: String,
    pub metric: String,
    pub value: f64,
    pub median: f64,
    pub mad: f64,
    pub threshold: f64,
    pub runs: usize,
}

fn floor_of(metric: &str) -> f64 {
    match metric {
        "hwm" => 1.0,
        "deadlocks" | "inversions" => 0.5,
        "wait_share" | "lost_parallelism" => baseline::SHARE_FLOOR,
        _ => baseline::RATIO_FLOOR,
    }
}

/// The threshold a figure must pass, given its history: see the module documentation.
pub fn threshold(history: &[f64], metric: &str) -> Option<(f64, f64, f64)> {
    if history.len() < MIN_HISTORY {
        return None;
    }
    let mut h = history.to_vec();
    let m = median(&mut h);
    let mut dev: Vec<f64> = history.iter().map(|x| (x - m).abs()).collect();
    let mad = median(&mut dev);
    let t = (m + K * 1.4826 * mad)
        .max(m + floor_of(metric))
        .max(m * (1.0 + MIN_RELATIVE));
    Some((t, m, mad))
}

/// The figures of `run` that moved past their history's threshold (those of [`TREND_ONLY`]
/// are not judged).
pub fn judge(history: &[StoredRun], run: &StoredRun) -> Vec<Alert> {
    let mut out = Vec::new();
    for ((scope, metric), &value) in &run.metrics {
        if TREND_ONLY.contains(&metric.as_str()) {
            continue;
        }
        let series: Vec<f64> = history
            .iter()
            .map(|r| {
                r.metrics
                    .get(&(scope.clone(), metric.clone()))
                    .copied()
                    .unwrap_or(0.0)
            })
            .collect();
        if let Some((t, m, mad)) = threshold(&series, metric) {
            if value > t {
                out.push(Alert {
                    scope: scope.clone(),
                    metric: metric.clone(),
                    value,
                    median: m,
                    mad,
                    threshold: t,
                    runs: series.len(),
                });
            }
        }
    }
    out
}

fn show_value(metric: &str, v: f64) -> String {
    match metric {
        "hwm" | "deadlocks" | "inversions" | "threads" | "processes" => format!("{v}"),
        m if m.ends_with("_ns") => crate::report::fmt_ns(v.max(0.0) as u64).replace(' ', ""),
        _ => format!("{:.1}%", v * 100.0),
    }
}

/// Day of the week (UTC) of a Unix time: 0 Sunday ... 6 Saturday (1970-01-01 was a Thursday).
pub fn weekday(unix_s: i64) -> i64 {
    (unix_s.div_euclid(86_400) + 4).rem_euclid(7)
}

pub const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

fn with_db<T>(
    db: &DbArgs,
    access: Access,
    err: &mut dyn Write,
    f: impl FnOnce(&mut dyn Store, &mut dyn Write) -> Result<T, String>,
) -> Result<T, i32> {
    let mut store = match open(db, access) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze history: {e}");
            return Err(crate::EXIT_BAD_INPUT);
        }
    };
    let name = db.db.clone().unwrap_or_else(default_db);
    f(store.as_mut(), err).map_err(|e| {
        let _ = writeln!(
            err,
            "waitshim-analyze history: {}: {}",
            redact(&name),
            hide_password(&name, &e)
        );
        crate::EXIT_BAD_INPUT
    })
}

fn read_run(logs: &[PathBuf], symbols: bool, err: &mut dyn Write) -> Result<StoredRun, i32> {
    let mut bad = false;
    let figs = super::figures_of(logs, symbols, err, &mut bad);
    if bad {
        return Err(crate::EXIT_BAD_INPUT);
    }
    Ok(stored_run(&figs))
}

/// Adds the run these logs make to `job`'s history in `db`.
pub fn add(job: &str, db: &DbArgs, logs: &[PathBuf], symbols: bool, err: &mut dyn Write) -> i32 {
    let run = match read_run(logs, symbols, err) {
        Ok(r) => r,
        Err(c) => return c,
    };
    match with_db(db, Access::Write, err, |s, err| {
        let id = s.add(job, &run)?;
        let _ = writeln!(
            err,
            "waitshim history: job {job}: run {id} added ({} figures)",
            run.metrics.len()
        );
        Ok(())
    }) {
        Ok(()) => 0,
        Err(c) => c,
    }
}

/// What `history check` says of a run with `figures` figures, compared with `runs` earlier runs
/// of the last `window`, that raised `alerts` (each has its own line): nothing when it alerted;
/// that it was not judged when fewer than [`MIN_HISTORY`] runs came before it (and that none
/// will be, when the window itself is smaller); else that nothing regressed.
pub fn verdict(
    job: &str,
    figures: usize,
    runs: usize,
    window: usize,
    alerts: usize,
) -> Option<String> {
    if alerts > 0 {
        return None;
    }
    if runs < MIN_HISTORY {
        let never = if window < MIN_HISTORY {
            format!(" (--window {window} compares with fewer: no run will be judged)")
        } else {
            String::new()
        };
        return Some(format!(
            "waitshim history: job {job}: not judged: {runs} earlier run(s), \
             {MIN_HISTORY} needed before a run is judged{never}"
        ));
    }
    Some(format!(
        "waitshim history: job {job}: no regression ({figures} figures against {runs} run(s))"
    ))
}

/// `waitshim-analyze history ...`.
pub fn command(c: HistoryCommand, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match c {
        HistoryCommand::Add {
            common,
            no_symbols,
            logs,
        } => add(&common.job, &common.db, &logs, !no_symbols, err),
        HistoryCommand::Check {
            common,
            json,
            add,
            window,
            notify,
            no_symbols,
            logs,
        } => {
            let run = match read_run(&logs, !no_symbols, err) {
                Ok(r) => r,
                Err(c) => return c,
            };
            let job = common.job.clone();
            let access = if add { Access::Write } else { Access::Read };
            let result = with_db(&common.db, access, err, |s, err| {
                let history = s.last(&job, window.max(1))?;
                let alerts = judge(&history, &run);
                for a in &alerts {
                    let _ = writeln!(
                        err,
                        "waitshim history: job {job}: REGRESSION {} {} = {}, over the last {} runs median {} (MAD {}), threshold {}",
                        a.scope,
                        a.metric,
                        show_value(&a.metric, a.value),
                        a.runs,
                        show_value(&a.metric, a.median),
                        show_value(&a.metric, a.mad),
                        show_value(&a.metric, a.threshold)
                    );
                    if json {
                        let line = serde_json::json!({
                            "event": "waitshim-regression",
                            "job": job,
                            "scope": a.scope,
                            "metric": a.metric,
                            "value": a.value,
                            "median": a.median,
                            "mad": a.mad,
                            "threshold": a.threshold,
                            "runs": a.runs,
                        });
                        let _ = writeln!(out, "{line}");
                    }
                }
                if let Some(line) =
                    verdict(&job, run.metrics.len(), history.len(), window, alerts.len())
                {
                    let _ = writeln!(err, "{line}");
                }
                if !alerts.is_empty() {
                    if let Some(cmd) = &notify {
                        let event = regression_event(&job, &run, &alerts);
                        notify_hook(cmd, &event, NOTIFY_TIMEOUT, err);
                    }
                }
                if add {
                    s.add(&job, &run)?;
                }
                Ok(alerts.len())
            });
            match result {
                Ok(0) => 0,
                Ok(_) => super::EXIT_FAILED,
                Err(c) => c,
            }
        }
        HistoryCommand::Show { common, last } => {
            let job = common.job.clone();
            let r = with_db(&common.db, Access::Read, err, |s, _| {
                let runs = s.last(&job, last.max(1))?;
                show(&job, &runs, out);
                Ok(())
            });
            match r {
                Ok(()) => 0,
                Err(c) => c,
            }
        }
    }
}

/// How long a `--notify` command may run before it is stopped.
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(60);

/// The event a regression raises: what `--notify` gets on stdin (docs/ci.md, History).
pub fn regression_event(job: &str, run: &StoredRun, alerts: &[Alert]) -> serde_json::Value {
    serde_json::json!({
        "event": "waitshim-regression",
        "job": job,
        "run": {
            "program": run.program,
            "logs": run.logs,
            "started_at": run.started_at,
        },
        "alerts": alerts.iter().map(|a| serde_json::json!({
            "scope": a.scope,
            "metric": a.metric,
            "value": a.value,
            "median": a.median,
            "mad": a.mad,
            "threshold": a.threshold,
            "runs": a.runs,
        })).collect::<Vec<_>>(),
    })
}

/// Runs `cmd` with `sh -c`, the event's JSON on its stdin and `WAITSHIM_EVENT` set to the
/// event's name; its output goes to stderr (stdout may hold `--json` lines). A command that
/// fails, or runs longer than `limit` (it is then killed), is said on `err`; true when it
/// succeeded.
pub fn notify_hook(
    cmd: &str,
    event: &serde_json::Value,
    limit: Duration,
    err: &mut dyn Write,
) -> bool {
    use std::os::fd::AsFd;
    use std::process::{Command, Stdio};
    let mut c = Command::new("sh");
    c.args(["-c", cmd])
        .env(
            "WAITSHIM_EVENT",
            event["event"].as_str().unwrap_or("waitshim-event"),
        )
        .stdin(Stdio::piped());
    if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
        c.stdout(Stdio::from(fd));
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            let _ = writeln!(err, "waitshim history: --notify: cannot run sh: {e}");
            return false;
        }
    };
    let mut body = event.to_string();
    body.push('\n');
    let writer = child.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            // A hook that does not read its stdin is its business.
            let _ = stdin.write_all(body.as_bytes());
        })
    });
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    match status {
        Some(st) if st.success() => {
            let _ = writeln!(
                err,
                "waitshim history: --notify: the regression was passed on"
            );
            true
        }
        Some(st) => {
            let _ = writeln!(
                err,
                "waitshim history: --notify: `{cmd}` failed ({st}): the regression was not passed on"
            );
            false
        }
        None => {
            let _ = writeln!(
                err,
                "waitshim history: --notify: `{cmd}` ran longer than {limit:?} and was stopped"
            );
            false
        }
    }
}

/// Prints every figure of every scope stored (the run's first, then each creation site's):
/// its value in each run, and its mean by hour of day and by day of week (UTC, of each run's
/// start).
pub fn show(job: &str, runs: &[StoredRun], out: &mut dyn Write) {
    let out = &mut crate::plain::Guard::new(out);
    let _ = writeln!(out, "job {job}: {} run(s)", runs.len());
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "runs: {}",
        runs.iter()
            .map(|r| format!(
                "#{} ({} {:02}h)",
                r.id,
                WEEKDAYS[weekday(r.started_at) as usize],
                r.hour
            ))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut keys: Vec<(String, String)> = runs
        .iter()
        .flat_map(|r| r.metrics.keys().cloned())
        .collect();
    // The run's figures first, then the objects'; each scope's figures by name.
    keys.sort_by(|a, b| {
        (!a.0.ends_with(": run"), &a.0, &a.1).cmp(&(!b.0.ends_with(": run"), &b.0, &b.1))
    });
    keys.dedup();
    let mut scope_shown = String::new();
    for (scope, metric) in &keys {
        if *scope != scope_shown {
            let _ = writeln!(out, "{scope}:");
            scope_shown = scope.clone();
        }
        let values: Vec<f64> = runs
            .iter()
            .map(|r| {
                r.metrics
                    .get(&(scope.clone(), metric.clone()))
                    .copied()
                    .unwrap_or(0.0)
            })
            .collect();
        let trend: Vec<String> = values.iter().map(|v| show_value(metric, *v)).collect();
        let judged = if TREND_ONLY.contains(&metric.as_str()) {
            " (not judged)"
        } else {
            ""
        };
        let _ = writeln!(out, "  {metric}{judged}: {}", trend.join(" "));
        let mean_by = |key: &dyn Fn(&StoredRun) -> i64| -> BTreeMap<i64, (f64, usize)> {
            let mut by: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
            for (r, v) in runs.iter().zip(&values) {
                let e = by.entry(key(r)).or_default();
                e.0 += v;
                e.1 += 1;
            }
            by
        };
        let hours: Vec<String> = mean_by(&|r| r.hour)
            .iter()
            .map(|(h, (sum, n))| format!("{h:02}h {} (n={n})", show_value(metric, sum / *n as f64)))
            .collect();
        let _ = writeln!(out, "    by hour of day (UTC): {}", hours.join(", "));
        let days: Vec<String> = mean_by(&|r| weekday(r.started_at))
            .iter()
            .map(|(d, (sum, n))| {
                format!(
                    "{} {} (n={n})",
                    WEEKDAYS[(*d).clamp(0, 6) as usize],
                    show_value(metric, sum / *n as f64)
                )
            })
            .collect();
        let _ = writeln!(out, "    by day of week (UTC): {}", days.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_with_too_little_history_is_said_not_judged_never_free_of_regression() {
        let short = verdict("ci", 12, 3, 20, 0).expect("a line");
        assert_eq!(
            short,
            "waitshim history: job ci: not judged: 3 earlier run(s), 5 needed before a run is judged"
        );
        assert!(!short.contains("no regression"), "{short}");
        assert_eq!(
            verdict("ci", 12, 5, 20, 0).as_deref(),
            Some("waitshim history: job ci: no regression (12 figures against 5 run(s))")
        );
        // A window smaller than the history needed judges nothing, ever: said.
        let never = verdict("ci", 12, 3, 3, 0).expect("a line");
        assert!(never.ends_with("(--window 3 compares with fewer: no run will be judged)"));
        // Regressions have their own lines.
        assert_eq!(verdict("ci", 12, 9, 20, 2), None);
    }

    #[test]
    fn the_rule_needs_history_and_ignores_noise() {
        assert_eq!(threshold(&[0.1, 0.1, 0.1, 0.1], "wait_share"), None);
        let (t, m, _) = threshold(&[0.10, 0.12, 0.09, 0.11, 0.10], "wait_share").unwrap();
        assert!((m - 0.10).abs() < 1e-9);
        assert!(t >= 0.15 - 1e-9, "{t}");
        // A figure that never moved: the floors decide.
        let (t, _, mad) = threshold(&[0.0; 8], "contended_ratio").unwrap();
        assert_eq!(mad, 0.0);
        assert!((t - 0.05).abs() < 1e-9);
        let (t, _, _) = threshold(&[0.0; 8], "wait_share").unwrap();
        assert!((t - 0.15).abs() < 1e-9);
        let (t, _, _) = threshold(&[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "hwm").unwrap();
        assert_eq!(t, 2.0);
        // One wild run in the history does not raise the bar much.
        let (t, _, _) = threshold(&[0.1, 0.1, 0.9, 0.1, 0.1, 0.1], "contended_ratio").unwrap();
        assert!(t < 0.2, "{t}");
    }

    #[test]
    fn weekdays_are_counted_from_a_thursday() {
        assert_eq!(WEEKDAYS[weekday(0) as usize], "Thu");
        // 2024-03-04 12:00 UTC, a Monday; a time before 1970 too.
        assert_eq!(WEEKDAYS[weekday(1_709_553_600) as usize], "Mon");
        assert_eq!(WEEKDAYS[weekday(-1) as usize], "Wed");
    }

    #[test]
    fn trend_only_figures_are_not_judged() {
        let mut old = StoredRun::default();
        old.metrics
            .insert(("p: run".into(), "duration_ns".into()), 1e9);
        let history = vec![old; 6];
        let mut new = StoredRun::default();
        new.metrics
            .insert(("p: run".into(), "duration_ns".into()), 1e12);
        assert!(judge(&history, &new).is_empty());
    }

    #[test]
    fn passwords_are_redacted_in_urls_and_key_value_strings() {
        let cases = [
            (
                "postgres://ci:s3cret@db:5432/w",
                "postgres://ci:***@db:5432/w",
            ),
            ("postgresql://ci@db/w", "postgresql://ci@db/w"),
            (
                "postgresql://ci:p@ss:w@db/w?sslmode=disable",
                "postgresql://ci:***@db/w?sslmode=disable",
            ),
            (
                "postgresql://db/w?user=ci&password=s3cret&x=1",
                "postgresql://db/w?user=ci&password=***&x=1",
            ),
            (
                "host=db password=s3cret dbname=w",
                "host=db password=*** dbname=w",
            ),
            (
                "host=db PASSWORD = 'a b\\' c' dbname=w",
                "host=db PASSWORD = *** dbname=w",
            ),
            ("password=", "password=***"),
            (
                "mypassword=x ./history.sqlite",
                "mypassword=x ./history.sqlite",
            ),
            (
                "error at postgres://u:pw@h/d: refused",
                "error at postgres://u:***@h/d: refused",
            ),
        ];
        for (given, shown) in cases {
            assert_eq!(redact(given), shown, "{given}");
        }
        assert!(is_postgres("host=db dbname=w"));
        assert!(is_postgres(" user=ci password=x"));
        assert!(!is_postgres("history=1.sqlite"));
        assert!(!is_postgres(".waitshim/history.sqlite"));
        let msg = hide_password(
            "user=ci password=longsecret host=h",
            "server said longsecret",
        );
        assert_eq!(msg, "server said ***");
    }

    #[test]
    fn sqlite_round_trip_and_migration_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let db = DbArgs {
            db: Some(dir.path().join("sub/h.sqlite").display().to_string()),
            ..DbArgs::default()
        };
        let mut run = StoredRun {
            started_at: 3_600 * 5,
            hour: 5,
            program: "p".into(),
            logs: 1,
            ..StoredRun::default()
        };
        run.metrics.insert(("p: run".into(), "hwm".into()), 2.0);
        for _ in 0..3 {
            open(&db, Access::Write).unwrap().add("job", &run).unwrap();
        }
        let runs = open(&db, Access::Read).unwrap().last("job", 2).unwrap();
        assert_eq!(runs.len(), 2);
        assert!(runs[0].id < runs[1].id);
        assert_eq!(runs[1].metrics, run.metrics);
        assert!(open(&db, Access::Read)
            .unwrap()
            .last("other", 5)
            .unwrap()
            .is_empty());
    }
}
