//! The binary starts, and its help lists every command.

#[test]
fn help_lists_every_command() {
    let out = super::helper::pinnerd_command()
        .arg("--help")
        .output()
        .expect("run pinnerd --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "topology",
        "measure",
        "plan",
        "compare",
        "check",
        "daemon",
        "status",
        "remeasure",
        "reload",
        "managed",
        "explain",
        "diff",
        "fleet",
        "export",
    ] {
        assert!(text.contains(cmd), "help does not list {cmd}:\n{text}");
    }
}
