//! The shim never changes what a program computes.

use waitshim_tests::Launch;

#[test]
fn semantics_program_checks_every_mutex_return_code_identically_under_the_shim() {
    let native = Launch::fixture("semantics").native().run();
    native.assert_success();
    let run = Launch::fixture("semantics").run();
    run.assert_success();
    let native_out = native.stdout_text();
    let checks = native_out
        .lines()
        .filter(|l| l.starts_with("check "))
        .count();
    assert!(checks >= 20, "only {checks} check lines:\n{native_out}");
    assert_eq!(
        run.stdout_text(),
        native_out,
        "stdout under the shim differs from the native run"
    );
    assert!(native_out.ends_with("semantics: all checks passed\n"));
    assert!(run.stderr.is_empty(), "stderr: {}", run.stderr_text());
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    assert!(!a.log(0).objects().is_empty());
}
