//! The web UI in a real browser: headless Chromium (Debian's `chromium`) driven through
//! WebDriver (Debian's `chromium-driver`, with the `fantoccini` client) against our
//! coordinator and our runner (`e2e_runner_support`: real HTTP on loopback, SQLite, the
//! shell executor running real scripts). WebDriver was chosen over a CDP client: Debian
//! ships the driver, and `fantoccini` builds small (no generated protocol crate).
//!
//! Each test writes a screenshot of every page it looks at to
//! `<target>/tmp/browser-screenshots/<test>/NN-what.png` (not committed), for people to
//! look at. `scripts/test` installs `chromium` and `chromium-driver`; without them these
//! tests fail and say so. `GANTRY_CHROMIUM` and `GANTRY_CHROMEDRIVER` name other binaries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e_runner_support::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// Chromium behind chromedriver, and the WebDriver session; both end on drop.
struct Browser {
    client: Client,
    driver: Child,
    shots: PathBuf,
    count: AtomicUsize,
}

fn binary(env: &str, default: &str) -> String {
    let path = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: install Debian's chromium and chromium-driver (scripts/test does), or set {env}"
    );
    path
}

impl Browser {
    async fn start(test: &str) -> Self {
        let chromium = binary("GANTRY_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = binary("GANTRY_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--no-first-run", "--disable-extensions"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("[browser] waiting for chromedriver: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no WebDriver session with {chromium}: {e}"),
            }
        };
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("browser-screenshots")
            .join(test);
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).unwrap();
        Self {
            client,
            driver,
            shots,
            count: AtomicUsize::new(0),
        }
    }

    /// Writes a screenshot of the page as `NN-what.png`.
    async fn shot(&self, what: &str) {
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(self.shots.join(format!("{n:02}-{what}.png")), png).unwrap();
    }

    async fn goto(&self, url: &str, what: &str) {
        self.client.goto(url).await.expect(url);
        self.shot(what).await;
    }

    /// The first element `css` selects, waited for up to `limit`.
    async fn wait_css(&self, css: &str, limit: Duration) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(limit)
            .every(Duration::from_millis(50))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` within {limit:?}: {e}"))
    }

    /// The element containing `text` (XPath), waited for up to `limit`.
    async fn wait_text(&self, text: &str, limit: Duration) -> fantoccini::elements::Element {
        let xpath = format!("//*[contains(text(), '{text}')]");
        self.client
            .wait()
            .at_most(limit)
            .every(Duration::from_millis(50))
            .for_element(Locator::XPath(&xpath))
            .await
            .unwrap_or_else(|e| panic!("no `{text}` on the page within {limit:?}: {e}"))
    }

    /// Signs in on the sign-in page with `token`.
    async fn sign_in(&self, server: &Server) {
        self.goto(&format!("{}/-/login", server.url), "sign-in")
            .await;
        let form = self.client.form(Locator::Css("form")).await.unwrap();
        form.set_by_name("token", &server.admin).await.unwrap();
        form.submit().await.unwrap();
        // Only a signed-in page has the sign-out button.
        self.wait_css("form.out button", Duration::from_secs(10))
            .await;
        self.shot("projects").await;
    }

    /// The bytes of the page's HTML, as the browser got it (`document.documentElement`).
    async fn html_len(&self) -> usize {
        self.client.source().await.unwrap().len()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A job that prints, waits for the test's signals (files in `dir`), then prints a red
/// line 2 s later and a collapsed section.
fn live_ci(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"
live:
  script:
    - echo first line
    - while [ ! -e {d}/ready ]; do sleep 0.05; done
    - echo ready line
    - while [ ! -e {d}/go ]; do sleep 0.05; done
    - sleep 2
    - printf '\033[31mred second line\033[0m\n'; touch {d}/printed
    - START=$(date +%s)
    - printf '\033[0Ksection_start:%s:details[collapsed=true]\r\033[0KMy details\n' "$START"
    - echo hidden inside the section
    - printf '\033[0Ksection_end:%s:details\r\033[0K\n' "$((START + 3))"
    - while [ ! -e {d}/end ]; do sleep 0.05; done
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_log_is_live_coloured_and_sectioned() {
    let signals = tempfile::tempdir().unwrap();
    let setup = Setup::new(&live_ci(signals.path()), &[]).await;
    let server = &setup.server;
    let _runner = setup.runner("", "");
    let browser = Browser::start("live_log").await;
    browser.sign_in(server).await;

    let pipeline = server.create_pipeline(setup.project).await;
    let job = server
        .wait_job_status(
            setup.project,
            pipeline,
            "live",
            "running",
            Duration::from_secs(60),
        )
        .await;
    let job_url = job["web_url"].as_str().unwrap().to_owned();
    browser.goto(&job_url, "job-running").await;
    let page_len = browser.html_len().await;
    assert!(page_len < 100 * 1024, "the job page is {page_len} bytes");
    browser
        .wait_text("first line", Duration::from_secs(15))
        .await;
    // The runner learns that somebody watches from the answer to its next patch: the
    // `ready` line comes with the first patch after the page was opened.
    std::fs::write(signals.path().join("ready"), "").unwrap();
    browser
        .wait_text("ready line", Duration::from_secs(15))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(signals.path().join("go"), "").unwrap();
    let printed = signals.path().join("printed");
    wait_for(Duration::from_secs(20), "the red line printed", || {
        printed.exists()
    })
    .await;
    let printed_at = Instant::now();
    // (The shell echoes the command first, in green: the output is the red span.)
    let red = browser
        .wait_css("#log .term-fg-red", Duration::from_secs(10))
        .await;
    let latency = printed_at.elapsed();
    browser.shot("job-live-line").await;
    assert!(
        latency <= Duration::from_secs(2),
        "the line printed 2 s later took {latency:?} to show"
    );
    // No reload: the page is the one opened (a reload would have reset this mark).
    assert_eq!(
        browser
            .client
            .execute(
                "return document.getElementById('log').dataset.mark || 'none';",
                vec![]
            )
            .await
            .unwrap(),
        Value::String("none".into())
    );
    browser
        .client
        .execute(
            "document.getElementById('log').dataset.mark = 'kept';",
            vec![],
        )
        .await
        .unwrap();
    // Its colour: GitLab's red.
    assert_eq!(
        red.attr("class").await.unwrap().as_deref(),
        Some("term-fg-red")
    );
    assert_eq!(
        red.css_value("color").await.unwrap(),
        "rgba(223, 109, 109, 1)"
    );

    // The collapsed section: its header with the duration, its line hidden until opened.
    let header = browser
        .wait_css("[data-section='details'] > .hdr", Duration::from_secs(10))
        .await;
    assert!(header.text().await.unwrap().contains("My details"));
    let inside = browser
        .wait_text("hidden inside the section", Duration::from_secs(10))
        .await;
    assert!(
        !inside.is_displayed().await.unwrap(),
        "a collapsed section hides its lines"
    );
    let duration = browser
        .wait_css("[data-section='details'] .dur", Duration::from_secs(10))
        .await;
    assert_eq!(duration.text().await.unwrap(), "00:03");
    header.click().await.unwrap();
    assert!(inside.is_displayed().await.unwrap(), "expanded");
    browser.shot("job-section-expanded").await;
    header.click().await.unwrap();
    assert!(!inside.is_displayed().await.unwrap(), "collapsed again");
    browser.shot("job-section-collapsed").await;

    std::fs::write(signals.path().join("end"), "").unwrap();
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "success", "{done}");
    // The page saw the end without a reload.
    browser
        .client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#log[data-complete='1']"))
        .await
        .unwrap();
    let mark = browser
        .client
        .execute(
            "return document.getElementById('log').dataset.mark;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(mark, Value::String("kept".into()));
    assert_eq!(
        browser
            .wait_css("#status .s", Duration::from_secs(5))
            .await
            .text()
            .await
            .unwrap(),
        "success"
    );
    browser.shot("job-done").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_need_their_csrf_token_and_runners_pause() {
    let setup = Setup::new("job:\n  script: [echo hi]\n", &[]).await;
    let server = &setup.server;
    let browser = Browser::start("csrf").await;
    browser.sign_in(server).await;
    browser
        .goto(&format!("{}/-/runners", server.url), "runners")
        .await;
    let (_, runners) = server.call(reqwest::Method::GET, "runners/all", None).await;
    let runner_id = runners[0]["id"].as_i64().unwrap();

    // The Pause form without its token: refused, nothing done.
    browser
        .client
        .execute(
            "document.querySelectorAll('input[name=authenticity_token]').forEach(function (i) { i.remove(); });",
            vec![],
        )
        .await
        .unwrap();
    let pause = format!("form[action='/-/runners/{runner_id}/pause'] button");
    browser
        .wait_css(&pause, Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser
        .wait_text("lacks its CSRF token", Duration::from_secs(10))
        .await;
    browser.shot("csrf-refused").await;
    let (_, runner) = server
        .call(reqwest::Method::GET, &format!("runners/{runner_id}"), None)
        .await;
    assert_eq!(runner["paused"], false, "{runner}");

    // With it: paused.
    browser
        .goto(&format!("{}/-/runners", server.url), "runners-again")
        .await;
    browser
        .wait_css(&pause, Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser.wait_text("(paused)", Duration::from_secs(10)).await;
    browser.shot("runner-paused").await;
    let (_, runner) = server
        .call(reqwest::Method::GET, &format!("runners/{runner_id}"), None)
        .await;
    assert_eq!(runner["paused"], true, "{runner}");

    // A link to /-/logout signs nobody out; the button does.
    browser
        .goto(&format!("{}/-/logout", server.url), "logout-page")
        .await;
    browser
        .goto(&format!("{}/-/runners", server.url), "still-signed-in")
        .await;
    browser.wait_text("(paused)", Duration::from_secs(5)).await;
    browser
        .wait_css("form.out button", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser
        .wait_text("Admin token", Duration::from_secs(10))
        .await;
    browser
        .goto(&format!("{}/-/runners", server.url), "signed-out")
        .await;
    browser
        .wait_text("Admin token", Duration::from_secs(10))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_graph_draws_needs_and_links_child_pipelines() {
    let ci = "
stages: [build, test, deploy]
compile:
  stage: build
  script: [echo compile]
lint:
  stage: build
  script: [echo lint]
unit:
  stage: test
  needs: [compile]
  script: [echo unit]
child:
  stage: deploy
  trigger:
    include: child.yml
";
    let setup = Setup::new(ci, &[("child.yml", "inner:\n  script: [echo inner]\n")]).await;
    let server = &setup.server;
    let _runner = setup.runner("", "");
    let pipeline = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(120))
        .await;
    assert_eq!(done["status"], "success", "{done}");
    let browser = Browser::start("pipeline_graph").await;
    browser.sign_in(server).await;
    let web_url = done["web_url"].as_str().unwrap().to_owned();
    browser.goto(&web_url, "pipeline-by-stage").await;
    let page_len = browser.html_len().await;
    assert!(
        page_len < 100 * 1024,
        "the pipeline page is {page_len} bytes"
    );

    // The `needs` edge, drawn between the two named jobs; none for `lint`.
    let edge = browser
        .wait_css(
            "svg.edges path[data-from='compile'][data-to='unit']",
            Duration::from_secs(10),
        )
        .await;
    let d = edge.attr("d").await.unwrap().unwrap();
    assert!(d.starts_with('M'), "{d}");
    let edges = browser
        .client
        .find_all(Locator::Css("svg.edges path"))
        .await
        .unwrap();
    assert_eq!(edges.len(), 1, "only `unit` has `needs:`");
    // Grouped by job dependencies: `unit` one column after `compile`, `lint` beside
    // `compile`.
    browser
        .wait_css("a[href$='view=needs']", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser.wait_css(".switch b", Duration::from_secs(5)).await;
    browser.shot("pipeline-by-needs").await;
    let columns: Value = browser
        .client
        .execute(
            "return Array.from(document.querySelectorAll('.stage')).map(function (c) { \
               return Array.from(c.querySelectorAll('.job')).map(function (j) { return j.getAttribute('data-name'); }); });",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(columns[0], json!(["compile", "lint"]), "{columns}");
    assert_eq!(columns[1], json!(["unit"]), "{columns}");
    browser
        .wait_css(
            "svg.edges path[data-from='compile'][data-to='unit']",
            Duration::from_secs(5),
        )
        .await;

    // The child pipeline's card, and the way back to the parent and its trigger job.
    let card = browser.wait_css("a.card", Duration::from_secs(5)).await;
    assert!(card.text().await.unwrap().contains("triggered by child"));
    card.click().await.unwrap();
    let back = browser
        .wait_css(".upstream a", Duration::from_secs(10))
        .await;
    browser.shot("child-pipeline").await;
    browser.wait_text("inner", Duration::from_secs(5)).await;
    assert!(
        back.text()
            .await
            .unwrap()
            .contains(&format!("pipeline #{pipeline}"))
    );
    back.click().await.unwrap();
    browser.wait_css("a.card", Duration::from_secs(10)).await;
    let url = browser.client.current_url().await.unwrap();
    assert!(
        url.as_str().ends_with(&format!("/-/pipelines/{pipeline}")),
        "{url}"
    );
    browser.shot("back-to-parent").await;
}

/// A pipeline whose first job leaves artifacts and a JUnit report with a failed case,
/// whose second fails, whose third is skipped for it.
const FACTS_CI: &str = r#"
stages: [build, test, deploy]
build:
  stage: build
  variables:
    GREETING: "hello <world>"
    DEPLOY_TOKEN: "job-level-secret-1"
  script:
    - mkdir -p out/sub
    - echo 'report <b>one</b>' > out/sub/report.txt
    - printf '%s' '<testsuite name="calc"><testcase classname="calc" name="adds"/><testcase classname="calc" name="divides by zero"><failure message="boom">expected 1, got 2</failure></testcase></testsuite>' > junit.xml
  artifacts:
    paths: [out/]
    reports:
      junit: junit.xml
unit:
  stage: test
  script: [echo failing, exit 3]
deploy:
  stage: deploy
  script: [echo never]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pages_show_artifacts_facts_and_the_test_report() {
    let setup = Setup::new(FACTS_CI, &[]).await;
    let server = &setup.server;
    let project = setup.project;
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            &format!("projects/{project}/variables"),
            Some(json!({"key": "DEPLOY_TOKEN", "value": "project-secret-1", "masked": true})),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED);
    let _runner = setup.runner("", "");
    let (status, created) = server
        .call(
            reqwest::Method::POST,
            &format!("projects/{project}/pipeline"),
            Some(json!({"ref": "main", "variables": [
                {"key": "FROM_PIPELINE", "value": "visible-value"},
                {"key": "LEAKS", "value": "has project-secret-1 inside"}
            ]})),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{created}");
    let pipeline = created["id"].as_i64().unwrap();
    let done = server
        .wait_pipeline(project, pipeline, Duration::from_secs(120))
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    let browser = Browser::start("job_facts").await;
    browser.sign_in(server).await;

    // The job with artifacts: its runner, durations, variables (masked hidden).
    let build = server.job_named(project, pipeline, "build").await;
    let build_url = build["web_url"].as_str().unwrap().to_owned();
    browser.goto(&build_url, "job-build").await;
    assert!(browser.html_len().await < 100 * 1024);
    let runner = browser.wait_css("#runner a", Duration::from_secs(5)).await;
    assert!(runner.text().await.unwrap().starts_with('#'));
    browser.wait_css("#queued", Duration::from_secs(5)).await;
    browser.wait_css("#duration", Duration::from_secs(5)).await;
    browser
        .wait_css("#variables summary", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser.shot("job-build-variables").await;
    let vars = browser
        .wait_css("#variables table", Duration::from_secs(5))
        .await
        .text()
        .await
        .unwrap();
    assert!(vars.contains("hello <world>"), "{vars}");
    assert!(vars.contains("DEPLOY_TOKEN"), "{vars}");
    assert!(
        !vars.contains("job-level-secret-1"),
        "a masked key's value shows: {vars}"
    );
    assert!(vars.contains("masked"), "{vars}");

    // Download the archive (a zip), browse it, open a file.
    let download = browser
        .wait_css("#artifacts a.download", Duration::from_secs(5))
        .await
        .attr("href")
        .await
        .unwrap()
        .unwrap();
    let got = browser
        .client
        .execute_async(
            "var done = arguments[arguments.length - 1]; \
             fetch(arguments[0]).then(function (r) { return r.arrayBuffer().then(function (b) { \
               var v = new Uint8Array(b); done([r.status, r.headers.get('content-disposition'), v[0], v[1]]); }); });",
            vec![json!(download)],
        )
        .await
        .unwrap();
    assert_eq!(got[0], 200, "{got}");
    assert!(got[1].as_str().unwrap().starts_with("attachment"), "{got}");
    assert_eq!(
        (got[2].as_u64(), got[3].as_u64()),
        (Some(b'P'.into()), Some(b'K'.into())),
        "a zip: {got}"
    );
    browser
        .wait_css("#artifacts a.browse", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser
        .wait_css("a.dir", Duration::from_secs(10))
        .await
        .click()
        .await
        .unwrap();
    browser.shot("artifacts-out").await;
    browser
        .wait_css("a.dir", Duration::from_secs(10))
        .await
        .click()
        .await
        .unwrap();
    browser
        .wait_css("a.file", Duration::from_secs(10))
        .await
        .click()
        .await
        .unwrap();
    let file = browser.wait_css("pre.file", Duration::from_secs(10)).await;
    browser.shot("artifact-file").await;
    assert_eq!(file.text().await.unwrap().trim(), "report <b>one</b>");
    assert!(browser.html_len().await < 100 * 1024);

    // The failed job says why in words; the skipped one why it did not run.
    let unit = server.job_named(project, pipeline, "unit").await;
    browser
        .goto(unit["web_url"].as_str().unwrap(), "job-failed")
        .await;
    let failure = browser.wait_css("#failure", Duration::from_secs(5)).await;
    let failure = failure.text().await.unwrap();
    assert!(failure.contains("The script failed"), "{failure}");
    assert!(failure.contains("exit code 3"), "{failure}");
    let deploy = server.job_named(project, pipeline, "deploy").await;
    assert_eq!(deploy["status"], "skipped");
    browser
        .goto(deploy["web_url"].as_str().unwrap(), "job-skipped")
        .await;
    let why = browser
        .wait_css("#why-not-run", Duration::from_secs(5))
        .await
        .text()
        .await
        .unwrap();
    assert!(why.contains("unit"), "{why}");

    // The pipeline's tabs: the failed test case with its output; the variables.
    let pipeline_url = done["web_url"].as_str().unwrap().to_owned();
    browser.goto(&pipeline_url, "pipeline").await;
    browser
        .wait_css(".tabs a[href$='/test_report']", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    let case = browser
        .wait_css("tr.case.failed", Duration::from_secs(10))
        .await;
    browser.shot("test-report").await;
    assert!(case.text().await.unwrap().contains("divides by zero"));
    browser
        .wait_text("expected 1, got 2", Duration::from_secs(5))
        .await;
    assert!(browser.html_len().await < 100 * 1024);
    browser
        .wait_css(".tabs a[href$='/variables']", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    let vars = browser
        .wait_css("table.variables", Duration::from_secs(10))
        .await
        .text()
        .await
        .unwrap();
    browser.shot("pipeline-variables").await;
    assert!(vars.contains("visible-value"), "{vars}");
    assert!(!vars.contains("project-secret-1"), "{vars}");
    browser
        .wait_css(".tabs a[href$='/builds']", Duration::from_secs(5))
        .await
        .click()
        .await
        .unwrap();
    browser
        .wait_css("table.jobs", Duration::from_secs(10))
        .await;
    browser.shot("pipeline-jobs").await;

    // The list: commit title and author, filtered by status.
    let list = pipeline_url.split("/-/").next().unwrap().to_owned();
    browser.goto(&list, "pipelines").await;
    let title = browser
        .wait_css("small.title", Duration::from_secs(5))
        .await;
    assert!(!title.text().await.unwrap().is_empty());
    browser
        .goto(
            &format!("{list}/-/pipelines?status=success"),
            "pipelines-success",
        )
        .await;
    browser
        .wait_css("form.filters", Duration::from_secs(5))
        .await;
    assert!(
        browser
            .client
            .find_all(Locator::Css("table.pipelines small.title"))
            .await
            .unwrap()
            .is_empty(),
        "no pipeline succeeded"
    );
    browser
        .goto(&format!("{list}/-/settings/ci_cd"), "settings")
        .await;
    let settings = browser
        .wait_css("table.variables", Duration::from_secs(5))
        .await
        .text()
        .await
        .unwrap();
    assert!(settings.contains("DEPLOY_TOKEN") && !settings.contains("project-secret-1"));

    // The runners page: what the runner said about itself, at phone width too.
    browser
        .goto(&format!("{}/-/runners", server.url), "runners")
        .await;
    let row = browser
        .wait_css("table.runners tr[id^='runner-']", Duration::from_secs(5))
        .await
        .text()
        .await
        .unwrap();
    assert!(row.contains("shell"), "the executor: {row}");
    assert!(row.contains("127.0.0.1"), "the address: {row}");
    browser.client.set_window_size(390, 844).await.unwrap();
    browser.goto(&build_url, "job-phone").await;
    browser
        .goto(&format!("{}/-/runners", server.url), "runners-phone")
        .await;
    let overflow = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        overflow,
        Value::Bool(true),
        "the runners page is wider than a phone"
    );
}
