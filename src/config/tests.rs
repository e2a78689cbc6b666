//! Loading whole configurations: layering, the example file, every section's errors.

use std::path::PathBuf;

use super::*;

fn load(toml_text: &str, env: &[(&str, &str)], args: CommonArgs) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml_text).unwrap();
    let args = CommonArgs {
        config: Some(path),
        ..args
    };
    let mut env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.push(("HOME".into(), "/home/test".into()));
    Config::load_from(&args, &env).map_err(|e| e.0)
}

#[test]
fn a_config_file_larger_than_any_real_one_is_refused_before_it_is_read() {
    let big = format!("# {}\n", "x".repeat(5 << 20));
    let e = load(&big, &[], CommonArgs::default()).unwrap_err();
    assert!(e.contains("is larger than 4,194,304 bytes"), "{e}");
}

#[test]
fn layers_file_then_env_then_flags() {
    let c = load(
        "[agent]\nmax_rounds = 7\n[upstream]\nurl = \"http://127.0.0.1:1/v1\"\nmodel = \"file\"\n",
        &[
            ("TOOLPILOT_AGENT__MAX_ROUNDS", "9"),
            ("TOOLPILOT_UPSTREAM_API_KEY", "sk-x"),
        ],
        CommonArgs {
            model: Some("flag".into()),
            ..CommonArgs::default()
        },
    )
    .unwrap();
    assert_eq!(c.agent.max_rounds, 9);
    assert_eq!(c.agent.model.as_deref(), Some("flag"));
    let u = c.upstreams.into_iter().next().unwrap();
    assert_eq!(u.base_url.as_str(), "http://127.0.0.1:1/v1/");
    assert_eq!(u.api_key.as_deref(), Some("sk-x"));
    assert_eq!(
        u.api_key_source.as_deref(),
        Some("TOOLPILOT_UPSTREAM_API_KEY")
    );
}

#[test]
fn the_example_config_loads_and_documents_every_key() {
    let example = include_str!("../../config.example.toml");
    let c = load(example, &[], CommonArgs::default()).unwrap();
    assert_eq!(c.agent.max_rounds, 25);
    assert_eq!(c.sensitive_files.len(), DEFAULT_SENSITIVE.len());
    // The example's protected paths are the defaults, so a copied example protects as much.
    assert_eq!(
        c.policy.protected,
        DEFAULT_PROTECTED
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    );
    // The example's deny_read is the default list (plus the state folder).
    let defaults = load("", &[], CommonArgs::default()).unwrap();
    assert_eq!(c.terminal.deny_read, defaults.terminal.deny_read);
    // Every key of every section, including the commented-out ones.
    let keys = [
        "workspace",
        "sensitive_files",
        "bind",
        "bearer_token_env",
        "admin_token_env",
        "allowed_hosts",
        "allowed_origins",
        "max_body_bytes",
        "keepalive_secs",
        "shutdown_grace_secs",
        "mcp",
        "mcp_elicitation",
        "workers",
        "progress",
        "detach",
        "models",
        "context_window",
        "tool_mode",
        "kind",
        "fallback",
        "mode",
        "timeout_secs",
        "handoff",
        "handoff_max_age_secs",
        "handoff_max_bytes",
        "pause_expiry_secs",
        "url",
        "model",
        "api_key_env",
        "headers",
        "connect_timeout_secs",
        "first_byte_timeout_secs",
        "idle_timeout_secs",
        "total_timeout_secs",
        "max_retries",
        "retry_base_ms",
        "retry_max_wait_secs",
        "request_usage",
        "always_stream",
        "max_response_bytes",
        "max_rounds",
        "approve_asks",
        "default_tools",
        "detect_repeats",
        "repeat_limit",
        "output_budget",
        "grep_max_results",
        "grep_context_lines",
        "grep_max_per_file",
        "grep_max_file_bytes",
        "glob_max_results",
        "ls_max_entries",
        "diff_max_lines",
        "search_exclude",
        "search_timeout_secs",
        "git_timeout_secs",
        "call_timeout_secs",
        "snapshot_timeout_secs",
        "command_writes",
        "deny",
        "ask",
        "allow",
        "max_download_bytes",
        "page_chars",
        "provider",
        "max_results",
        "system_message",
        "extra",
        "listing_entries",
        "global_dir",
        "agents_md",
        "max_file_bytes",
        "wait_secs",
        "embeddings_model",
        "rerank_candidates",
        "deny_read",
        "readonly",
        "max_offered_tools",
        "command",
        "args",
        "env",
        "cwd",
        "policy",
        "enabled",
        "startup_timeout_secs",
        "call_max_secs",
        "enabled_tools",
        "disabled_tools",
        "sandbox",
        "writable",
        "network",
    ];
    for key in keys {
        assert!(
            example
                .lines()
                .any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} ="))),
            "config.example.toml does not document `{key}`"
        );
    }
    for section in [
        "[server]",
        "[upstream]",
        "[upstreams.",
        "[aliases]",
        "[agent]",
        "[tools]",
        "[policy]",
        "[policy.tools]",
        "[approvals]",
        "[web]",
        "[web.search]",
        "[prompt]",
        "[codebase]",
        "[mcp]",
        "[mcp.servers.NAME]",
    ] {
        assert!(example.contains(section), "{section}");
    }
}

#[test]
fn command_writes_is_ask_or_allow() {
    let c = load(
        "[policy]\ncommand_writes = \"allow\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap();
    assert_eq!(c.policy.command_writes, WritesSwitch::Allow);
    let c = load("", &[], CommonArgs::default()).unwrap();
    assert_eq!(c.policy.command_writes, WritesSwitch::Ask);
    let e = load(
        "[policy]\ncommand_writes = \"yes\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("policy.command_writes: \"yes\" is not a choice"),
        "{e}"
    );
    let e = load(
        "[policy]\ncommand_write = \"allow\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(e.contains("unknown field `command_write`"), "{e}");
}

#[test]
fn web_keys_are_validated_and_named() {
    let bad = |toml: &str| load(toml, &[], CommonArgs::default()).unwrap_err();
    let e = bad("[web]\nallow = [\"127.0.0.1\", \"10.0.0.0/33\"]\n");
    assert!(
        e.contains("web.allow[1] \"10.0.0.0/33\": not a valid address range"),
        "{e}"
    );
    let e = bad("[web]\nallow = [\"http://x/\"]\n");
    assert!(e.contains("web.allow[0]"), "{e}");
    let e = bad("[web]\ntimeout_secs = 0\n");
    assert!(e.contains("web.timeout_secs must be a positive"), "{e}");
    let e = bad("[web]\npage_chars = 10\n");
    assert!(e.contains("web.page_chars must be at least 1000"), "{e}");
    let e = bad("[web.search]\nprovider = \"google\"\n");
    assert!(
        e.contains("web.search.provider: \"google\" is not one of"),
        "{e}"
    );
    let e = bad("[web.search]\nprovider = \"searxng\"\n");
    assert!(
        e.contains("web.search.url: the searxng provider needs"),
        "{e}"
    );
    let e = bad("[web.search]\nprovider = \"brave\"\nurl = \"ftp://x\"\n");
    assert!(
        e.contains("web.search.url: \"ftp://x\" must be an http"),
        "{e}"
    );
    let e = bad("[web.search]\nprovider = \"brave\"\nmax_results = 50\n");
    assert!(
        e.contains("web.search.max_results must be between 1 and 20"),
        "{e}"
    );
    let e = bad("[web.search]\nurl = \"http://127.0.0.1:8888\"\n");
    assert!(e.contains("web.search.provider: set it"), "{e}");
    let e = bad("[web]\nallowed = []\n");
    assert!(e.contains("web.allowed: unknown field"), "{e}");

    let c = load(
        "[web.search]\nprovider = \"brave\"\n",
        &[("BRAVE_API_KEY", "brave-key-123456")],
        CommonArgs::default(),
    )
    .unwrap();
    let s = c.web.search.clone().unwrap();
    assert_eq!(s.provider, SearchProvider::Brave);
    assert_eq!(
        s.url.as_str(),
        "https://api.search.brave.com/res/v1/web/search"
    );
    assert_eq!(s.api_key.as_deref(), Some("brave-key-123456"));
    assert!(c.secret_var_names().contains(&"BRAVE_API_KEY".to_string()));
}

#[test]
fn secrets_are_the_named_and_the_scrubbed_variables() {
    let c = load(
        "[web.search]\nprovider = \"tavily\"\napi_key_env = \"SEARCH_KEY\"\n",
        &[
            ("SEARCH_KEY", "tvly-0123456789abcdef"),
            ("MY_SERVICE_TOKEN", "service-token-value"),
            ("DB_PASSWORD", "hunter2hunter2"),
            ("SHORT_TOKEN", "abc"),
            ("PATH", "/usr/bin:/bin:/usr/local/bin"),
            ("TOOLPILOT_UPSTREAM_API_KEY", "sk-upstream-0123456789"),
        ],
        CommonArgs::default(),
    )
    .unwrap();
    let names: Vec<&str> = c.secrets.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            // The admin token generated for this start (64 hex digits, the longest).
            "TOOLPILOT_ADMIN_TOKEN",
            "TOOLPILOT_UPSTREAM_API_KEY",
            "SEARCH_KEY",
            "MY_SERVICE_TOKEN",
            "DB_PASSWORD"
        ]
    );
}

#[test]
fn commands_are_denied_credentials_and_the_state_folder() {
    let state = CommonArgs {
        state_dir: Some("/var/tp".into()),
        ..CommonArgs::default()
    };
    let c = load("", &[], state.clone()).unwrap();
    let d = &c.terminal.deny_read;
    assert!(d.contains(&PathBuf::from("/home/test/.ssh")), "{d:?}");
    assert!(d.contains(&PathBuf::from("/home/test/.aws")), "{d:?}");
    assert_eq!(d.last(), Some(&PathBuf::from("/var/tp")));
    assert_eq!(d.len(), DEFAULT_DENY_READ.len() + 1);
    // Configured: the list replaces the defaults; the state folder is always added.
    let c = load(
        "[terminal]\ndeny_read = [\"~/.secret\", \"/etc/app/key\"]\n",
        &[],
        state.clone(),
    )
    .unwrap();
    assert_eq!(
        c.terminal.deny_read,
        [
            PathBuf::from("/home/test/.secret"),
            "/etc/app/key".into(),
            "/var/tp".into()
        ]
    );
    for (toml_text, message) in [
        (
            "deny_read = [\"notes\"]",
            "\"notes\" is not an absolute path",
        ),
        ("deny_read = [\"/\"]", "would hide every file"),
        (
            "readonly = [\"../x\"]",
            "must be a path inside the workspace",
        ),
        (
            "readonly = [\"/abs\"]",
            "must be a path inside the workspace",
        ),
    ] {
        let e = load(&format!("[terminal]\n{toml_text}\n"), &[], state.clone()).unwrap_err();
        assert!(e.contains(message), "{toml_text}: {e}");
    }
    let c = load(
        "[terminal]\nreadonly = [\".git\", \".vscode/tasks.json\"]\n",
        &[],
        state,
    )
    .unwrap();
    assert_eq!(
        c.terminal.readonly,
        [PathBuf::from(".git"), ".vscode/tasks.json".into()]
    );
}

#[test]
fn the_admin_token_is_generated_unless_its_variable_is_set() {
    let a = load("", &[], CommonArgs::default()).unwrap();
    let b = load("", &[], CommonArgs::default()).unwrap();
    let (ta, tb) = (&a.server.admin_token, &b.server.admin_token);
    assert!(!ta.from_env && ta.value().len() == 64 && ta.value() != tb.value());
    assert!(ta.matches(ta.value()) && !ta.matches(tb.value()) && !ta.matches(""));
    assert!(
        !format!("{:?}", a.server).contains(ta.value()),
        "Debug shows the token"
    );
    let c = load(
        "[server]\nadmin_token_env = \"MY_ADMIN\"\n",
        &[("MY_ADMIN", "chosen-admin-token-1")],
        CommonArgs::default(),
    )
    .unwrap();
    let t = &c.server.admin_token;
    assert!(t.from_env && t.value() == "chosen-admin-token-1" && t.env == "MY_ADMIN");
    assert!(c.secret_var_names().contains(&"MY_ADMIN".to_string()));
    assert!(
        c.secrets
            .iter()
            .any(|(k, v)| k == "MY_ADMIN" && v == t.value())
    );
    let e = load(
        "",
        &[("TOOLPILOT_ADMIN_TOKEN", "short")],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("$TOOLPILOT_ADMIN_TOKEN must be at least 16 printable characters"),
        "{e}"
    );
    let e = load(
        "",
        &[("TOOLPILOT_ADMIN_TOKEN", "has a space in it, sadly")],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(e.contains("without spaces"), "{e}");
}

#[test]
fn errors_name_the_key() {
    let e = load("[agent]\nmax_roundz = 7\n", &[], CommonArgs::default()).unwrap_err();
    assert!(
        e.contains("agent.max_roundz: unknown field `max_roundz`"),
        "{e}"
    );
    let e = load(
        "[server]\nbind = \"localhost\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(e.contains("server.bind"), "{e}");
    let e = load(
        "[policy.tools]\nread_file = \"maybe\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("policy.tools.read_file: \"maybe\" is not a policy"),
        "{e}"
    );
    let e = load(
        "[policy.tools]\nread_fil = \"allow\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(e.contains("no built-in tool named \"read_fil\""), "{e}");
    let e = load(
        "[upstream]\ntotal_timeout_secs = -1\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("upstream.total_timeout_secs must be a positive"),
        "{e}"
    );
    let e = load("", &[("TOOLPILOT_AGENT__NOPE", "1")], CommonArgs::default()).unwrap_err();
    assert!(
        e.contains("TOOLPILOT_AGENT__NOPE (agent.nope): unknown field `nope`"),
        "{e}"
    );
    let e = load(
        "",
        &[("TOOLPILOT_AGENT__MAX_ROUNDS", "zero")],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(
        e.contains("TOOLPILOT_AGENT__MAX_ROUNDS (agent.max_rounds): invalid type"),
        "{e}"
    );
    let e = load(
        "[tools]\nls_max_entries = \"many\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(e.contains(": tools.ls_max_entries: invalid type"), "{e}");
    // A bad rule is reported by `Policy::new` (see tests/suite/policy.rs,
    // `a_bad_rule_stops_start_up_with_its_key_named`): the rules stay text here.
    let c = load(
        "[policy]\ndeny = [\"read_file(\"]\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap();
    assert_eq!(c.policy.deny, ["read_file("]);
    let e = load("[codebase]\nwait_secs = 0\n", &[], CommonArgs::default()).unwrap_err();
    assert!(e.contains("codebase.wait_secs must be a positive"), "{e}");
    let e = load(
        "[prompt]\nsystem_mesage = true\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap_err();
    assert!(e.contains("prompt.system_mesage: unknown field"), "{e}");
    let c = load(
        "[prompt]\nglobal_dir = \"~/rules-home\"\n",
        &[],
        CommonArgs::default(),
    )
    .unwrap();
    assert_eq!(
        c.prompt.global_dir.as_deref(),
        Some(std::path::Path::new("/home/test/rules-home"))
    );
}

#[test]
fn workers_default_to_one_per_core_and_are_bounded() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let c = load("", &[], CommonArgs::default()).unwrap();
    assert_eq!(c.server.workers, cores);
    let c = load("[server]\nworkers = 0\n", &[], CommonArgs::default()).unwrap();
    assert_eq!(c.server.workers, cores);
    let c = load(
        "",
        &[("TOOLPILOT_SERVER__WORKERS", "3")],
        CommonArgs::default(),
    )
    .unwrap();
    assert_eq!(c.server.workers, 3);
    let e = load("[server]\nworkers = 100000\n", &[], CommonArgs::default()).unwrap_err();
    assert!(e.contains("server.workers: 100000 is more than 256"), "{e}");
    let e = load("[server]\nworkers = -1\n", &[], CommonArgs::default()).unwrap_err();
    assert!(e.contains("server.workers"), "{e}");
}

#[test]
fn mcp_servers_resolve_and_every_mistake_names_its_key() {
    let c = load(
        "[mcp.servers.gh]\ncommand = \"npx\"\nargs = [\"-y\", \"server\"]\n\
         env = { TOKEN = \"${GH_TOKEN}\" }\npolicy = \"allow\"\n\
         [mcp.servers.web]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         headers = { Authorization = \"Bearer ${WEB_KEY}\" }\ncall_timeout_secs = 5\n\
         [mcp.servers.off]\ncommand = \"x\"\nenabled = false\n\
         [policy]\nallow = [\"mcp__web__*\"]\n",
        &[
            ("GH_TOKEN", "ghp-0123456789"),
            ("WEB_KEY", "key-0123456789"),
        ],
        CommonArgs::default(),
    )
    .unwrap();
    let names: Vec<&str> = c.mcp.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["gh", "web"]);
    match &c.mcp.servers[0].transport {
        McpTransport::Stdio { env, .. } => {
            assert_eq!(env, &[("TOKEN".to_string(), "ghp-0123456789".to_string())])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.mcp.servers[0].policy, Level::Allow);
    assert_eq!(c.mcp.servers[1].policy, Level::Ask);
    assert_eq!(c.mcp.servers[1].call_timeout, Duration::from_secs(5));
    // The variables named are secrets: scrubbed from commands, redacted from results.
    assert!(c.secret_var_names().contains(&"GH_TOKEN".to_string()));
    assert!(c.secrets.iter().any(|(k, _)| k == "WEB_KEY"));
    assert_eq!(
        c.policy.tool_prefixes,
        vec![
            ("mcp__gh__".to_string(), Level::Allow),
            ("mcp__web__".to_string(), Level::Ask)
        ]
    );
    for (toml_text, expected) in [
        (
            "[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h/\"\n",
            "mcp.servers.a: set either `command`",
        ),
        ("[mcp.servers.a]\n", "mcp.servers.a: set `command`"),
        (
            "[mcp.servers.\"a b\"]\ncommand = \"x\"\n",
            "mcp.servers.a b: a server name is 1 to 32",
        ),
        ("[mcp.servers.a__b]\ncommand = \"x\"\n", "(no `__`)"),
        (
            "[mcp.servers.a]\ncommand = \"x\"\nenv = { T = \"${MISSING_VAR}\" }\n",
            "mcp.servers.a.env.T: the environment variable MISSING_VAR is not set",
        ),
        (
            "[mcp.servers.a]\nurl = \"ftp://h/\"\n",
            "mcp.servers.a.url: \"ftp://h/\" is not an http:// or https:// URL",
        ),
        (
            "[mcp.servers.a]\nurl = \"http://h/\"\nenv = { A = \"b\" }\n",
            "mcp.servers.a.env: `env` is for `command` servers",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\npolicy = \"sometimes\"\n",
            "mcp.servers.a.policy: \"sometimes\" is not a policy",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\ncall_timeout_secs = 10\ncall_max_secs = 5\n",
            "mcp.servers.a.call_max_secs (5 s) is shorter than call_timeout_secs (10 s)",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\nstartup = 5\n",
            "unknown field `startup`",
        ),
        (
            "[mcp.servers.a]\nurl = \"http://h/\"\nsandbox = false\n",
            "mcp.servers.a.sandbox: `sandbox` is for `command` servers",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\nwritable = [\"rel/dir\"]\n",
            "mcp.servers.a.writable: \"rel/dir\" is not an absolute path",
        ),
    ] {
        let e = load(toml_text, &[], CommonArgs::default()).unwrap_err();
        assert!(e.contains(expected), "{toml_text}: {e}");
    }
}
