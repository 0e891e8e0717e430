//! The shim never changes what a program computes.

use waitshim_tests::run_semantics;

#[test]
fn semantics_program_checks_every_mutex_return_code_identically_under_the_shim() {
    let run = run_semantics("semantics", 20);
    let a = run.analyze();
    assert!(a.status.success(), "analyzer: {}", a.stderr);
    assert!(!a.log(0).objects().is_empty());
}
