use super::*;

fn suite(xml: &str) -> TestSuite {
    let mut report = TestReport::default();
    report.suite("rspec").add_report(xml.as_bytes());
    report.finish();
    report.test_suites.remove(0)
}

#[test]
fn cases_statuses_and_output_like_gitlab() {
    let s = suite(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="all">
  <testsuite name="math" tests="5">
    <testcase classname="math.Add" name="adds" time="0.25" file="spec/add_spec.rb"/>
    <testcase classname="math.Div" name="divides &lt;by zero&gt;" time="1.5">
      <failure message="expected 1, got 2" type="AssertionError">Traceback:
  line 3</failure>
      <system-out>printed</system-out>
      <system-err><![CDATA[warned <loudly>]]></system-err>
    </testcase>
    <testcase classname="math.Sub" name="subtracts" time="x">
      <error message="boom"/>
    </testcase>
    <testcase classname="math.Mul" name="multiplies"><skipped/></testcase>
    <testcase classname="math.Pow" name="powers"><skipped message="not on Tuesdays"/></testcase>
  </testsuite>
</testsuites>
"#,
    );
    assert_eq!(s.suite_error, None);
    assert_eq!(
        (
            s.counts.total_count,
            s.counts.success_count,
            s.counts.failed_count,
            s.counts.error_count,
            s.counts.skipped_count
        ),
        (5, 1, 1, 1, 2)
    );
    assert_eq!(s.counts.total_time, 1.75);
    let c = &s.test_cases;
    assert_eq!(
        (
            c[0].status.as_str(),
            c[0].name.as_str(),
            c[0].classname.as_str(),
            c[0].file.as_deref(),
            c[0].system_output.as_deref()
        ),
        (
            "success",
            "adds",
            "math.Add",
            Some("spec/add_spec.rb"),
            None
        )
    );
    assert_eq!(c[1].name, "divides <by zero>");
    assert_eq!(c[1].status, "failed");
    assert_eq!(
        c[1].system_output.as_deref(),
        Some(
            "expected 1, got 2\nTraceback:\n  line 3\n\nSystem Out:\n\nprinted\n\nSystem Err:\n\nwarned <loudly>"
        )
    );
    assert_eq!((c[2].status.as_str(), c[2].execution_time), ("error", 0.0));
    assert_eq!(c[2].system_output.as_deref(), Some("boom"));
    assert_eq!(
        (c[3].status.as_str(), c[3].system_output.as_deref()),
        ("skipped", None)
    );
    assert_eq!(c[4].system_output.as_deref(), Some("not on Tuesdays"));
}

#[test]
fn where_cases_count() {
    // Directly under the top-level `testsuites`, in nested suites (PHPUnit), and in a
    // second document of the same report (a second file of the gzip stream); not at the
    // root, and not inside another case.
    let s = suite(
        r#"<testsuites><testcase name="top"/>
<testsuite name="outer"><testsuite name="inner"><testcase name="nested"/></testsuite></testsuite>
</testsuites>
<?xml version="1.0"?>
<testsuite name="second"><testcase name="other file"/></testsuite>
<testcase name="at the root"/>
"#,
    );
    let names: Vec<&str> = s.test_cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["top", "nested", "other file"]);
}

#[test]
fn a_report_that_is_not_xml_is_a_suite_error_with_no_counts() {
    let s = suite(
        "<testsuite><testcase name=\"a\"/></testsuite>\n<testsuite><testcase name=\"b\"></testsuite>",
    );
    let error = s.suite_error.as_deref().unwrap_or_default();
    assert!(error.starts_with("JUnit XML parsing failed: "), "{error}");
    assert_eq!((s.counts.total_count, s.test_cases.len()), (0, 0));
}

#[test]
fn limits_on_cases_and_output() {
    let mut report = TestReport::default();
    let many = format!(
        "<testsuite>{}</testsuite>",
        "<testcase name=\"t\"/>".repeat(4)
    );
    let s = report.suite("limited");
    if let Err(e) = s.parse(many.as_bytes(), 3) {
        s.suite_error = Some(e);
    }
    assert_eq!(
        s.suite_error.as_deref(),
        Some("JUnit data parsing failed: number of test cases exceeded the limit of 3")
    );

    let deep = format!(
        "<testsuite>{}<testcase name=\"t\"/></testsuite>",
        "<a>".repeat(MAX_DEPTH)
    );
    let s = suite(&deep);
    assert_eq!(
        s.suite_error.as_deref(),
        Some("JUnit data parsing failed: elements are nested more than 256 deep")
    );

    let long = "x".repeat(MAX_CASE_OUTPUT * 2);
    let s = suite(&format!(
        "<testsuite><testcase name=\"t\"><failure>{long}</failure></testcase></testsuite>"
    ));
    let output = s.test_cases[0].system_output.clone().unwrap_or_default();
    assert!(output.len() < MAX_CASE_OUTPUT + 100, "{}", output.len());
    assert!(
        output.ends_with("[output cut: Gantry keeps 64 KiB per test case and 16 MiB per suite]")
    );
}

#[test]
fn suites_are_named_after_jobs_without_their_instance() {
    assert_eq!(suite_name("rspec 2/4"), "rspec");
    assert_eq!(suite_name("rspec"), "rspec");
    assert_eq!(suite_name("test: [linux, amd64]"), "test: [linux, amd64]");
    assert_eq!(suite_name("deploy 2/x"), "deploy 2/x");
    assert_eq!(suite_name("a /1"), "a /1");
}

#[test]
fn totals_sum_the_suites() {
    let mut report = TestReport::default();
    report
        .suite("a")
        .add_report(&b"<testsuite><testcase name=\"1\" time=\"0.1\"/><testcase name=\"2\" time=\"0.2\"><failure/></testcase></testsuite>"[..]);
    report
        .suite("b")
        .add_report(&b"<testsuite><testcase name=\"3\" time=\"0.3\"/></testsuite>"[..]);
    report.suite("c").add_report(&b"<testsuite><testcase"[..]);
    report.finish();
    assert_eq!(
        (
            report.counts.total_count,
            report.counts.success_count,
            report.counts.failed_count,
            report.counts.total_time
        ),
        (3, 2, 1, 0.6)
    );
    assert!(report.test_suites[2].suite_error.is_some());
}

#[test]
fn no_input_panics() {
    // Every prefix of a report, and the report with each byte replaced by characters
    // XML gives meaning to: a report or a suite error, never a panic.
    let report = r#"<?xml version="1.0"?><testsuites><testsuite name="s"><testcase classname="c" name="n&amp;m" time="1e3"><failure message="m">t<![CDATA[x]]></failure><system-out>o</system-out></testcase><testcase name="é"/></testsuite></testsuites>"#;
    let bytes = report.as_bytes();
    for end in 0..=bytes.len() {
        let mut s = TestSuite::default();
        s.add_report(&bytes[..end]);
    }
    for at in 0..bytes.len() {
        for b in [b'<', b'>', b'&', b'"', b'/', 0xff, b'\n'] {
            let mut changed = bytes.to_vec();
            changed[at] = b;
            let mut s = TestSuite::default();
            s.add_report(&changed[..]);
            s.finish();
            assert!(s.suite_error.is_some() || s.counts.total_count <= 2);
        }
    }
}
