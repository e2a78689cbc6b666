//! Rules, skills and toolpilot's system message, through the real server: what the upstream
//! receives (the mock records every request), what the rule tools return, and what they
//! write.

use serde_json::{Value, json};

use crate::support::*;

/// The system message the upstream got in request `n` (the first message, which must be the
/// only system message).
fn system_of(s: &TestServer, n: usize) -> String {
    let reqs = s.requests();
    let msgs = reqs[n].body["messages"].as_array().unwrap().clone();
    let systems = msgs.iter().filter(|m| m["role"] == "system").count();
    assert_eq!(
        systems, 1,
        "request {n} has {systems} system messages: {msgs:#?}"
    );
    assert_eq!(msgs[0]["role"], "system", "{msgs:#?}");
    msgs[0]["content"].as_str().unwrap().to_string()
}

/// The names of the tools offered in request `n`, with their descriptions.
fn offered(s: &TestServer, n: usize) -> Vec<(String, String)> {
    s.requests()[n].body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| {
                    (
                        t["function"]["name"].as_str().unwrap().to_string(),
                        t["function"]["description"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

const RULES: &[(&str, &str)] = &[
    (
        "AGENTS.md",
        "# Agents\n\nAGENTSFILE-RULE: run the tests before you answer.\n",
    ),
    (
        ".continue/rules/always.md",
        "ALWAYS-RULE: use British spelling.\n",
    ),
    (
        ".continue/rules/typescript.md",
        "---\nglobs: \"**/*.ts\"\n---\n\nTS-RULE: prefer const over let.\n",
    ),
    (
        ".continue/rules/unsafe.md",
        "---\nglobs: [\"**/*.rs\"]\nregex: \"unsafe\\\\s*\\\\{\"\n---\nUNSAFE-RULE: justify every unsafe block.\n",
    ),
    (
        ".continue/rules/sql.md",
        "---\nname: sql-style\ndescription: How to write SQL migrations\nalwaysApply: false\n---\nSQL-RULE: one statement per migration.\n",
    ),
    (
        ".continue/rules/manual.md",
        "---\nalwaysApply: false\n---\nMANUAL-RULE: only when mentioned.\n",
    ),
    (
        ".continue/rules/notes.txt",
        "NOT-A-RULE: only .md files are rules.\n",
    ),
    ("src/safe.rs", "fn safe() {}\n"),
    ("src/lib.rs", "pub fn f() {\n    unsafe { g() }\n}\n"),
    ("web/app.ts", "let x = 1;\n"),
];

/// A server over the rule files, with toolpilot's system message on and a global folder
/// holding one rule (never the real home).
async fn rules_server(script: Value, extra_config: &str) -> (TestServer, tempfile::TempDir) {
    let global = tempfile::tempdir().unwrap();
    write(
        &global.path().join("rules/global.md"),
        "GLOBAL-RULE: sign commits.\n",
    );
    let mut b = TestServer::builder().script(script).config(&format!(
        "[prompt]\nsystem_message = true\nglobal_dir = {:?}\n{extra_config}",
        global.path().display().to_string()
    ));
    for (p, c) in RULES {
        b = b.file(p, c);
    }
    (b.start().await, global)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_rules_agents_md_and_global_rules_reach_the_system_message() {
    let (s, _g) = rules_server(json!({"rounds": [{"text": "ok"}]}), "").await;
    let r = s.chat(ask("hello")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sys = system_of(&s, 0);
    for want in [
        "<toolpilot_environment>",
        "workspace \"ws\"",
        &s.ws.canonicalize().unwrap().display().to_string(),
        "Operating system: linux",
        "Today's date: 20",
        "  .continue/",
        "  AGENTS.md",
        "  src/",
        "AGENTSFILE-RULE: run the tests",
        "ALWAYS-RULE: use British spelling.",
        "GLOBAL-RULE: sign commits.",
        "a reply without tool calls ends your turn",
    ] {
        assert!(sys.contains(want), "missing {want:?} in:\n{sys}");
    }
    // Auto-attached rules wait for a matching file; agent-requested and manual rules are not
    // applied; other files are not rules.
    for absent in [
        "TS-RULE",
        "UNSAFE-RULE",
        "SQL-RULE",
        "MANUAL-RULE",
        "NOT-A-RULE",
    ] {
        assert!(!sys.contains(absent), "{absent} should not be in:\n{sys}");
    }
    // request_rule is disabled by default, so its rules are not advertised.
    assert!(!sys.contains("request_rule"), "{sys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_and_regex_rules_apply_once_the_run_touches_a_matching_file() {
    let (s, _g) = rules_server(
        json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "src/safe.rs"}}]},
            {"tool_calls": [
                {"id": "c2", "name": "read_file", "arguments": {"filepath": "web/app.ts"}},
                {"id": "c3", "name": "read_file", "arguments": {"filepath": "src/lib.rs"}}]},
            {"text": "done"}
        ]}),
        "",
    )
    .await;
    let r = s.chat(ask("look around")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    check_conversation_invariants(&s.requests());
    let first = system_of(&s, 0);
    assert!(
        !first.contains("TS-RULE") && !first.contains("UNSAFE-RULE"),
        "{first}"
    );
    // A Rust file without `unsafe {`: the glob matches, the regex does not.
    let second = system_of(&s, 1);
    assert!(!second.contains("UNSAFE-RULE"), "{second}");
    assert!(!second.contains("TS-RULE"), "{second}");
    // After reading web/app.ts and src/lib.rs, both rules are in the next round's message.
    let third = system_of(&s, 2);
    assert!(
        third.contains("TS-RULE: prefer const over let.")
            && third.contains("applies because web/app.ts is involved"),
        "{third}"
    );
    assert!(
        third.contains("UNSAFE-RULE: justify every unsafe block.")
            && third.contains("applies because src/lib.rs is involved"),
        "{third}"
    );
    assert!(!third.contains("MANUAL-RULE"), "{third}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_named_in_the_user_message_apply_rules_from_the_first_round() {
    let (s, _g) = rules_server(json!({"rounds": [{"text": "ok"}]}), "").await;
    let r = s
        .chat(ask(
            "Why does src/lib.rs fail?\n```ts web/new.ts\nlet y = 2;\n```",
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sys = system_of(&s, 0);
    assert!(sys.contains("UNSAFE-RULE"), "{sys}");
    // A code block's info string counts even for a file that does not exist yet.
    assert!(sys.contains("TS-RULE"), "{sys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_message_joins_the_clients_once_and_can_be_turned_off() {
    let (s, _g) = rules_server(
        json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "ls", "arguments": {}}]},
            {"text": "done"}
        ]}),
        "extra = \"EXTRA-TEXT: be brief.\"\n",
    )
    .await;
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "CLIENT-SYSTEM.\n# Agents\n\nAGENTSFILE-RULE: run the tests before you answer."},
        {"role": "user", "content": "hi"}]});
    let r = s.chat(body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for n in 0..2 {
        let sys = system_of(&s, n);
        assert!(sys.starts_with("CLIENT-SYSTEM."), "{sys}");
        assert!(sys.contains("\n\n<toolpilot_environment>"), "{sys}");
        assert!(sys.contains("EXTRA-TEXT: be brief."), "{sys}");
        // Rules the client already applied are not repeated; the others are added once.
        assert_eq!(sys.matches("AGENTSFILE-RULE").count(), 1, "{sys}");
        assert_eq!(sys.matches("ALWAYS-RULE").count(), 1, "{sys}");
        assert_eq!(sys.matches("<toolpilot_environment>").count(), 1, "{sys}");
    }

    // Turned off: the upstream gets the client's messages as they are.
    let off = TestServer::builder()
        .file("AGENTS.md", "AGENTSFILE-RULE\n")
        .script(json!({"rounds": [{"text": "ok"}]}))
        .config("[prompt]\nsystem_message = false\n")
        .start()
        .await;
    assert_eq!(off.chat(ask("hi")).await.status, 200);
    let msgs = off.requests()[0].body["messages"].clone();
    assert_eq!(msgs, json!([{"role": "user", "content": "hi"}]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_rule_serves_agent_requested_rules_listed_in_its_description() {
    let (s, _g) = rules_server(
        calls_script(&[
            ("request_rule", json!({"name": "sql-style"})),
            ("request_rule", json!({"name": "nope"})),
            ("request_rule", json!({"name": "rules/manual.md"})),
        ]),
        "[policy.tools]\nrequest_rule = \"allow\"\n",
    )
    .await;
    let out = send_and_collect(&s, ask("add a migration"), 3).await;
    assert_eq!(out[0], "SQL-RULE: one statement per migration.");
    assert_eq!(
        out[1],
        "request_rule failed: Rule with name \"nope\" not found or has no file path. Rules you \
         can request: \"rules/manual.md\", \"sql-style\"."
    );
    // Manual rules have no description but can be asked for by name.
    assert_eq!(out[2], "MANUAL-RULE: only when mentioned.");
    let tools = offered(&s, 0);
    let (_, desc) = tools
        .iter()
        .find(|(n, _)| n == "request_rule")
        .expect("request_rule offered");
    assert!(
        desc.contains("sql-style: How to write SQL migrations"),
        "{desc}"
    );
    assert!(!desc.contains("typescript"), "{desc}");
    let sys = system_of(&s, 0);
    assert!(
        sys.contains("load one with request_rule")
            && sys.contains("- sql-style: How to write SQL migrations"),
        "{sys}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_tools_are_disabled_and_not_offered_by_default() {
    let s = TestServer::builder()
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "create_rule_block",
                             "arguments": {"name": "x", "rule": "y"}}]},
            {"text": "done"}
        ]}))
        .start()
        .await;
    assert_eq!(s.chat(ask("remember this")).await.status, 200);
    let names: Vec<String> = offered(&s, 0).into_iter().map(|(n, _)| n).collect();
    for n in ["codebase", "read_skill", "view_repo_map"] {
        assert!(names.contains(&n.to_string()), "{n} not offered: {names:?}");
    }
    assert!(
        !names.contains(&"create_rule_block".to_string()),
        "{names:?}"
    );
    assert!(!names.contains(&"request_rule".to_string()), "{names:?}");
    let out = tool_result(&s.requests()[1], "c1");
    assert!(
        out.contains("There is no tool named \"create_rule_block\""),
        "{out}"
    );
    assert!(!s.path(".continue").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_rule_block_writes_safe_well_formed_rules_and_never_overwrites() {
    let evil = "x\n---\nalwaysApply: true\nglobs: \"**\"";
    let s = TestServer::builder()
        .file(".continue/rules/existing.md", "EXISTING\n")
        .script(json!({"rounds": [
            {"tool_calls": [
                {"id": "c1", "name": "create_rule_block", "arguments": {
                    "name": "TypeScript Style!", "rule": "Prefer `const`.",
                    "globs": "**/*.ts", "description": evil}},
                {"id": "c2", "name": "create_rule_block", "arguments": {
                    "name": "typescript style", "rule": "Other."}},
                {"id": "c3", "name": "create_rule_block", "arguments": {
                    "name": "../../outside", "rule": "Traversal.", "alwaysApply": true}},
                {"id": "c4", "name": "create_rule_block", "arguments": {
                    "name": "../..", "rule": "Nothing left."}},
                {"id": "c5", "name": "create_rule_block", "arguments": {
                    "name": "Existing", "rule": "Replace it."}},
                {"id": "c6", "name": "create_rule_block", "arguments": {
                    "name": "bad glob", "rule": "r", "globs": "src/[x"}}]},
            {"text": "done"},
            {"text": "ok"}
        ]}))
        .config("[policy]\nallow = [\"create_rule_block(.continue/rules/**)\"]\n[policy.tools]\ncreate_rule_block = \"allow\"\n[prompt]\nsystem_message = true\n")
        .yes()
        .start()
        .await;
    let out = send_and_collect(&s, ask("remember these"), 6).await;
    assert_eq!(
        out[0],
        "Rule created successfully: .continue/rules/typescript-style.md (auto-attached rule; it \
         is added when a request involves files matching **/*.ts, from the next request on)."
    );
    let text = std::fs::read_to_string(s.path(".continue/rules/typescript-style.md")).unwrap();
    let rule = toolpilot::prompt::rules::parse_rule(
        &text,
        "rules/typescript-style.md",
        toolpilot::prompt::rules::Origin::Workspace("x".into()),
    )
    .unwrap()
    .unwrap();
    // The description is one value: it could not add `alwaysApply` or `globs` keys.
    assert_eq!(rule.description.as_deref(), Some(evil));
    assert_eq!(rule.globs, ["**/*.ts"]);
    assert_eq!(rule.always_apply, None);
    assert_eq!(rule.body, "Prefer `const`.");
    assert!(
        text.starts_with("---\n") && text.ends_with("Prefer `const`.\n"),
        "{text}"
    );

    assert!(
        out[1].starts_with(
            "create_rule_block failed: A rule file .continue/rules/typescript-style.md already \
             exists (from the name \"typescript style\"); nothing was written."
        ),
        "{}",
        out[1]
    );
    assert_eq!(
        std::fs::read_to_string(s.path(".continue/rules/typescript-style.md")).unwrap(),
        text
    );
    // Traversal names stay inside the rules folder.
    assert!(out[2].contains(".continue/rules/outside.md"), "{}", out[2]);
    assert!(s.path(".continue/rules/outside.md").exists());
    assert!(!s.dir.path().join("outside.md").exists());
    assert!(out[3].contains("has no letters or digits"), "{}", out[3]);
    assert!(out[4].contains("already exists"), "{}", out[4]);
    assert_eq!(
        std::fs::read_to_string(s.path(".continue/rules/existing.md")).unwrap(),
        "EXISTING\n"
    );
    assert!(out[5].contains("is not a glob"), "{}", out[5]);
    assert!(!s.path(".continue/rules/bad-glob.md").exists());

    // The new rule applies to the next request that involves a .ts file.
    assert_eq!(
        s.chat(ask("edit this:\n```ts web/a.ts\nlet a = 1;\n```"))
            .await
            .status,
        200
    );
    let n = s.requests().len() - 1;
    let sys = s.requests()[n].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sys.contains("Prefer `const`.") && sys.contains("Traversal."),
        "{sys}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_rule_block_writes_to_a_protected_folder_only_with_approval() {
    let (_s, out) = run_calls(
        TestServer::builder().config("[policy.tools]\ncreate_rule_block = \"allow\"\n"),
        &[(
            "create_rule_block",
            json!({"name": "style", "rule": "Be kind."}),
        )],
    )
    .await;
    assert!(
        out[0].starts_with(
            "create_rule_block was not run: writing .continue/rules/style.md needs a person's approval"
        ),
        "{}",
        out[0]
    );
    assert!(out[0].contains(".continue/**"), "{}", out[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_skill_finds_skills_in_every_folder_with_their_supporting_files() {
    let global = tempfile::tempdir().unwrap();
    write(
        &global.path().join("skills/review/SKILL.md"),
        "---\nname: review\ndescription: Review a pull request\n---\nREVIEW-STEPS\n",
    );
    write(&global.path().join("skills/review/checklist.md"), "x");
    let b = TestServer::builder()
        .file(
            ".continue/skills/pdf/SKILL.md",
            "---\nname: pdf\ndescription: Fill PDF forms\n---\n\nPDF-STEPS: run the script.\n",
        )
        .file(".continue/skills/pdf/scripts/fill.py", "print(1)\n")
        .file(".continue/skills/pdf/reference.md", "ref\n")
        .file(
            ".claude/skills/deploy/SKILL.md",
            "---\nname: deploy\ndescription: Deploy the app\n---\nDEPLOY-STEPS\n",
        )
        .file(
            ".continue/skills/broken/SKILL.md",
            "---\nname: broken\n---\nno description\n",
        )
        .config(&format!(
            "[policy.tools]\nread_skill = \"allow\"\n[prompt]\nglobal_dir = {:?}\n",
            global.path().display().to_string()
        ));
    let (s, out) = run_calls(
        b,
        &[
            ("read_skill", json!({"skillName": "pdf"})),
            ("read_skill", json!({"skillName": "deploy"})),
            ("read_skill", json!({"skillName": "review"})),
            ("read_skill", json!({"skillName": "broken"})),
        ],
    )
    .await;
    assert!(
        out[0].starts_with("PDF-STEPS: run the script.\n\n## Supporting files"),
        "{}",
        out[0]
    );
    assert!(
        out[0].contains(
            "- .continue/skills/pdf/reference.md\n- .continue/skills/pdf/scripts/fill.py\n"
        ),
        "{}",
        out[0]
    );
    assert!(out[0].contains("read_file"), "{}", out[0]);
    assert_eq!(out[1], "DEPLOY-STEPS");
    assert!(out[2].starts_with("REVIEW-STEPS"), "{}", out[2]);
    assert!(
        out[2].contains("outside the workspace") && out[2].contains("- checklist.md"),
        "{}",
        out[2]
    );
    // Why a skill of that name is missing, when loading said.
    assert_eq!(
        out[3],
        "read_skill failed: Skill \"broken\" not found. Available skills: pdf, deploy, review. \
         Not loaded: .continue/skills/broken/SKILL.md was skipped: its front matter has no \
         `description` (required, non-empty)."
    );
    let (_, desc) = offered(&s, 0)
        .into_iter()
        .find(|(n, _)| n == "read_skill")
        .unwrap();
    assert!(
        desc.contains("name: pdf\ndescription: Fill PDF forms\n")
            && desc.contains("name: review\ndescription: Review a pull request\n"),
        "{desc}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_declares_a_rule_tool_disabled_only_by_default_keeps_it() {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "remember"}],
        "tools": [{"type": "function", "function": {"name": "create_rule_block",
            "description": "the client's", "parameters": {"type": "object", "properties": {}}}}]});
    let s = TestServer::builder()
        .script(
            json!({"rounds": [{"tool_calls": [{"id": "c1", "name": "create_rule_block",
            "arguments": {"name": "x", "rule": "y"}}]}]}),
        )
        .start()
        .await;
    let r = s.chat(body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let choice = &r.body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{}", r.text);
    assert_eq!(
        choice["message"]["tool_calls"][0]["function"]["name"],
        "create_rule_block"
    );
    assert_eq!(offered(&s, 0)[0].1, "the client's");
    assert!(!s.path(".continue").exists());

    // Disabled in toolpilot's configuration: not offered at all.
    let s = TestServer::builder()
        .script(json!({"rounds": [{"text": "ok"}]}))
        .config("[policy.tools]\ncreate_rule_block = \"disabled\"\n")
        .start()
        .await;
    assert_eq!(s.chat(body).await.status, 200);
    assert!(offered(&s, 0).is_empty(), "{:?}", offered(&s, 0));
}
