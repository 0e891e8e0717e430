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

use super::baseline::{self, Scaled};
use super::cli::HistoryCommand;
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

/// Opens (creating and migrating) the database `db` names.
pub fn open(db: &str) -> Result<Box<dyn Store>, String> {
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        Ok(Box::new(Pg::open(db)?))
    } else {
        Ok(Box::new(Lite::open(Path::new(db))?))
    }
}

struct Lite {
    conn: rusqlite::Connection,
}

fn lite_err(e: rusqlite::Error) -> String {
    format!("SQLite: {e}")
}

impl Lite {
    fn open(path: &Path) -> Result<Lite, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let mut conn = rusqlite::Connection::open(path)
            .map_err(|e| format!("{}: {}", path.display(), lite_err(e)))?;
        // Concurrent writers wait for each other instead of failing.
        conn.busy_timeout(std::time::Duration::from_secs(60))
            .map_err(lite_err)?;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| format!("{}: {}", path.display(), lite_err(e)))?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            .map_err(|e| format!("{}: {}", path.display(), lite_err(e)))?;
        let v: Option<i64> = tx
            .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
            .map_err(lite_err)?;
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
                .map_err(lite_err)?;
            tx.execute("DELETE FROM schema_version", [])
                .map_err(lite_err)?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                [i as i64 + 1],
            )
            .map_err(lite_err)?;
        }
        tx.commit().map_err(lite_err)?;
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

struct Pg {
    client: postgres::Client,
}

fn pg_err(e: postgres::Error) -> String {
    // The error's own text is only "db error" for what the server said: say what it said.
    match e.as_db_error() {
        Some(db) => format!("PostgreSQL: {}: {}", db.severity(), db.message()),
        None => match std::error::Error::source(&e) {
            Some(src) => format!("PostgreSQL: {e}: {src}"),
            None => format!("PostgreSQL: {e}"),
        },
    }
}

impl Pg {
    fn open(url: &str) -> Result<Pg, String> {
        let mut client = postgres::Client::connect(url, postgres::NoTls).map_err(pg_err)?;
        let mut tx = client.transaction().map_err(pg_err)?;
        // One migrator at a time: the others wait here, then find the schema done.
        tx.execute("SELECT pg_advisory_xact_lock(7316501016)", &[])
            .map_err(pg_err)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            .map_err(pg_err)?;
        let v: Option<i32> = tx
            .query_one("SELECT MAX(version) FROM schema_version", &[])
            .map_err(pg_err)?
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
            tx.batch_execute(&m.replace("{ID}", "BIGSERIAL PRIMARY KEY"))
                .map_err(pg_err)?;
            tx.execute("DELETE FROM schema_version", &[])
                .map_err(pg_err)?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES ($1)",
                &[&(i as i32 + 1)],
            )
            .map_err(pg_err)?;
        }
        tx.commit().map_err(pg_err)?;
        Ok(Pg { client })
    }
}

impl Store for Pg {
    fn add(&mut self, job: &str, run: &StoredRun) -> Result<i64, String> {
        let mut tx = self.client.transaction().map_err(pg_err)?;
        let hour = i32::try_from(run.hour).unwrap_or(0);
        let logs = i32::try_from(run.logs).unwrap_or(i32::MAX);
        let id: i64 = tx
            .query_one(
                "INSERT INTO runs (job, added_at, started_at, hour, program, logs) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                &[&job, &run.added_at, &run.started_at, &hour, &run.program, &logs],
            )
            .map_err(pg_err)?
            .get(0);
        let st = tx
            .prepare("INSERT INTO metrics (run_id, scope, name, value) VALUES ($1, $2, $3, $4)")
            .map_err(pg_err)?;
        for ((scope, name), v) in &run.metrics {
            tx.execute(&st, &[&id, scope, name, v]).map_err(pg_err)?;
        }
        tx.commit().map_err(pg_err)?;
        Ok(id)
    }

    fn last(&mut self, job: &str, n: usize) -> Result<Vec<StoredRun>, String> {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let rows = self
            .client
            .query(
                "SELECT id, added_at, started_at, hour, program, logs FROM runs WHERE job = $1 ORDER BY id DESC LIMIT $2",
                &[&job, &n],
            )
            .map_err(pg_err)?;
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
        let rows = self
            .client
            .query(
                "SELECT run_id, scope, name, value FROM metrics WHERE run_id = ANY($1)",
                &[&ids],
            )
            .map_err(pg_err)?;
        for r in rows {
            let id: i64 = r.get(0);
            if let Some(run) = runs.iter_mut().find(|x| x.id == id) {
                run.metrics.insert((r.get(1), r.get(2)), r.get(3));
            }
        }
        Ok(runs)
    }
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

/// The figures of `run` that moved past their history's threshold.
pub fn judge(history: &[StoredRun], run: &StoredRun) -> Vec<Alert> {
    let mut out = Vec::new();
    for ((scope, metric), &value) in &run.metrics {
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
        "hwm" | "deadlocks" | "inversions" => format!("{v}"),
        _ => format!("{:.1}%", v * 100.0),
    }
}

fn with_db<T>(
    db: &Option<String>,
    err: &mut dyn Write,
    f: impl FnOnce(&mut dyn Store, &mut dyn Write) -> Result<T, String>,
) -> Result<T, i32> {
    let db = db.clone().unwrap_or_else(default_db);
    let mut store = match open(&db) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "waitshim-analyze history: {e}");
            return Err(crate::EXIT_BAD_INPUT);
        }
    };
    f(store.as_mut(), err).map_err(|e| {
        let _ = writeln!(err, "waitshim-analyze history: {db}: {e}");
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
pub fn add(
    job: &str,
    db: &Option<String>,
    logs: &[PathBuf],
    symbols: bool,
    err: &mut dyn Write,
) -> i32 {
    let run = match read_run(logs, symbols, err) {
        Ok(r) => r,
        Err(c) => return c,
    };
    match with_db(db, err, |s, err| {
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
            no_symbols,
            logs,
        } => {
            let run = match read_run(&logs, !no_symbols, err) {
                Ok(r) => r,
                Err(c) => return c,
            };
            let job = common.job.clone();
            let result = with_db(&common.db, err, |s, err| {
                let history = s.last(&job, window.max(1))?;
                let alerts = judge(&history, &run);
                if history.len() < MIN_HISTORY {
                    let _ = writeln!(
                        err,
                        "waitshim history: job {job}: {} earlier run(s), {MIN_HISTORY} needed before a run is judged",
                        history.len()
                    );
                }
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
                if alerts.is_empty() {
                    let _ = writeln!(
                        err,
                        "waitshim history: job {job}: no regression ({} figures against {} run(s))",
                        run.metrics.len(),
                        history.len()
                    );
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
            let r = with_db(&common.db, err, |s, _| {
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

/// Prints, for each run-level figure, its value per run, and its mean per hour of day (UTC).
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
            .map(|r| format!("#{} ({:02}h)", r.id, r.hour))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut keys: Vec<(String, String)> = runs
        .iter()
        .flat_map(|r| r.metrics.keys().cloned())
        .filter(|(scope, _)| scope.ends_with(": run"))
        .collect();
    keys.sort();
    keys.dedup();
    for (scope, metric) in &keys {
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
        let _ = writeln!(out, "{scope} {metric}: {}", trend.join(" "));
        let mut by_hour: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
        for (r, v) in runs.iter().zip(&values) {
            let e = by_hour.entry(r.hour).or_default();
            e.0 += v;
            e.1 += 1;
        }
        let hours: Vec<String> = by_hour
            .iter()
            .map(|(h, (sum, n))| format!("{h:02}h {} (n={n})", show_value(metric, sum / *n as f64)))
            .collect();
        let _ = writeln!(out, "  by hour of day (UTC): {}", hours.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sqlite_round_trip_and_migration_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sub/h.sqlite").display().to_string();
        let mut run = StoredRun {
            started_at: 3_600 * 5,
            hour: 5,
            program: "p".into(),
            logs: 1,
            ..StoredRun::default()
        };
        run.metrics.insert(("p: run".into(), "hwm".into()), 2.0);
        for _ in 0..3 {
            open(&db).unwrap().add("job", &run).unwrap();
        }
        let runs = open(&db).unwrap().last("job", 2).unwrap();
        assert_eq!(runs.len(), 2);
        assert!(runs[0].id < runs[1].id);
        assert_eq!(runs[1].metrics, run.metrics);
        assert!(open(&db).unwrap().last("other", 5).unwrap().is_empty());
    }
}
