//! `create_rule_block` (write a rule file) and `request_rule` (read an agent-requested rule),
//! plus `read_skill`. Their descriptions are generated from the loaded rules and skills.
//!
//! A new rule goes to `.continue/rules/<sanitised name>.md`: the name is sanitised like
//! Continue's (so it cannot leave that folder), the front matter is written by the YAML crate
//! (so values cannot add keys), the file is created through the workspace's no-clobber write
//! with a checkpoint, and an existing rule is never overwritten.

use serde_json::{Value, json};

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError, blocking};
use crate::policy::{Access, Target};
use crate::prompt::rules::{Origin, parse_rule, rule_markdown, sanitize_rule_name};
use crate::prompt::{Snapshot, skills};

pub struct CreateRuleBlock;
pub struct RequestRule;
pub struct ReadSkill;

/// The folder rules are created in.
pub const RULES_DIR: &str = ".continue/rules";

impl Tool for CreateRuleBlock {
    fn name(&self) -> &'static str {
        "create_rule_block"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/create_rule_block.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["name","rule"],"properties":{
            "name":{"type":"string","description":"Short, descriptive name of the rule (becomes the file name), e.g. 'React Component Standards'"},
            "rule":{"type":"string","description":"The rule itself: a clear, imperative instruction, e.g. 'Use named exports for React components'"},
            "description":{"type":"string","description":"When the rule should be used; with alwaysApply false the rule is only loaded on request"},
            "globs":{"type":"string","description":"Files the rule applies to, e.g. '**/*.{ts,tsx}'"},
            "regex":{"type":"string","description":"A regular expression: the rule applies to files whose content matches it"},
            "alwaysApply":{"type":"boolean","description":"true: always add the rule; false: only when its globs or regex match, or when requested"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let name = args.string("name")?;
        let rule = args.string("rule")?;
        let description = args.opt_string("description")?;
        // `globs` is a string in the schema; a list of strings is accepted and joined.
        let globs = match args.get("globs") {
            Some(Value::Array(items)) => {
                let list: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                if list.len() != items.len() {
                    return Err(ToolError::InvalidArguments(
                        "`globs` must be a string such as \"**/*.ts\" (or a list of strings)"
                            .into(),
                    ));
                }
                (!list.is_empty()).then(|| list.join(", "))
            }
            _ => args.opt_string("globs")?,
        };
        let regex = args.opt_string("regex")?;
        let always_apply = args.opt_bool("alwaysApply")?;
        let file = sanitize_rule_name(&name);
        if file.is_empty() {
            return Err(ToolError::InvalidArguments(format!(
                "`name` {name:?} has no letters or digits to make a file name from; use a short \
                 name such as \"typescript style\" (it becomes .continue/rules/typescript-style.md)"
            )));
        }
        let rel = format!("{RULES_DIR}/{file}.md");
        let text = rule_markdown(
            description.as_deref(),
            globs.as_deref(),
            regex.as_deref(),
            always_apply,
            &rule,
        )
        .map_err(ToolError::Failed)?;
        // Check the file reads back as the rule asked for (globs and regex compile).
        let parsed = parse_rule(
            &text,
            &format!("rules/{file}.md"),
            Origin::Workspace(rel.clone()),
        )
        .map_err(|e| ToolError::InvalidArguments(format!("the rule would not load: {e}")))?
        .ok_or_else(|| ToolError::Failed("the rule would load as a prompt".into()))?;
        let path = super::read::resolve(&env.workspace, &rel)?;
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Path {
                path: path.clone(),
                access: Access::Write,
            }],
            job: blocking(move || {
                if env.workspace.version(&path).is_some() || env.workspace.is_dir(&path) {
                    return Err(ToolError::Failed(format!(
                        "A rule file {rel} already exists (from the name {name:?}); nothing was \
                         written. To change that rule, read it with read_file and edit it with \
                         single_find_and_replace or edit_existing_file; to keep both, choose \
                         another name."
                    )));
                }
                super::edit::create(&env, &path, &rel, &text)?;
                // On the job's blocking thread: the next run and this run's tools see it.
                env.prompt.reload();
                let when = match parsed.kind() {
                    crate::prompt::rules::Kind::Always => {
                        "it is added to every request".to_string()
                    }
                    crate::prompt::rules::Kind::AutoAttached => {
                        let mut on = Vec::new();
                        if !parsed.globs.is_empty() {
                            on.push(format!("files matching {}", parsed.globs.join(", ")));
                        }
                        if !parsed.regex.is_empty() {
                            on.push(format!(
                                "files whose content matches {}",
                                parsed.regex.join(", ")
                            ));
                        }
                        format!("it is added when a request involves {}", on.join(" or "))
                    }
                    crate::prompt::rules::Kind::AgentRequested => format!(
                        "it is loaded on request (request_rule with name \"{}\")",
                        parsed.name
                    ),
                    crate::prompt::rules::Kind::Manual => {
                        "it is only used when the user mentions it".to_string()
                    }
                };
                Ok(format!(
                    "Rule created successfully: {rel} ({} rule; {when}, from the next request on).",
                    parsed.kind().label()
                ))
            }),
        })
    }
}

impl Tool for RequestRule {
    fn name(&self) -> &'static str {
        "request_rule"
    }
    fn description(&self) -> &'static str {
        "Use this tool to retrieve additional 'rules' that contain more context or instructions, \
         based on their descriptions. Call it with the exact name of a rule."
    }
    fn dynamic_description(&self, snap: &Snapshot) -> Option<String> {
        Some(snap.request_rule_description())
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["name"],"properties":{
            "name":{"type":"string","description":"The exact name of the rule, as listed in this tool's description"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let name = args.string("name")?;
        let snap = env.prompt.latest();
        let Some(rule) = snap.rules.find(name.trim()) else {
            let names: Vec<String> = snap
                .rules
                .requestable()
                .map(|r| format!("\"{}\"", r.name))
                .collect();
            return Err(ToolError::Failed(format!(
                "Rule with name \"{name}\" not found or has no file path. Rules you can request: {}.{}",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
                skipped_note(&snap.rules.warnings, name.trim())
            )));
        };
        let targets = match &rule.origin {
            Origin::Workspace(rel) => match env.workspace.resolve(rel) {
                Ok(p) => vec![Target::Path {
                    path: p,
                    access: Access::Read,
                }],
                Err(_) => Vec::new(),
            },
            Origin::Global(_) => Vec::new(),
        };
        let body = if rule.body.is_empty() {
            format!("(The rule \"{}\" is empty.)", rule.name)
        } else {
            rule.body.clone()
        };
        Ok(Invocation {
            targets,
            job: Box::pin(std::future::ready(Ok(body))),
        })
    }
}

impl Tool for ReadSkill {
    fn name(&self) -> &'static str {
        "read_skill"
    }
    fn description(&self) -> &'static str {
        "Read a skill: instructions (and supporting files) for a specific kind of task. Call with \
         the exact skillName."
    }
    fn dynamic_description(&self, snap: &Snapshot) -> Option<String> {
        Some(snap.read_skill_description())
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["skillName"],"properties":{
            "skillName":{"type":"string","description":"The name of the skill, as listed in this tool's description"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let wanted = args.string("skillName")?;
        let snap = env.prompt.latest();
        let Some(skill) = snap.skills.find(&wanted) else {
            let names: Vec<&str> = snap.skills.skills.iter().map(|s| s.name.as_str()).collect();
            return Err(ToolError::Failed(format!(
                "Skill \"{wanted}\" not found. Available skills: {}{}",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
                match skipped_note(&snap.skills.warnings, wanted.trim()) {
                    note if note.is_empty() => note,
                    note => format!(".{note}"),
                }
            )));
        };
        let targets = if skill.in_workspace {
            match env.workspace.resolve(&format!("{}/SKILL.md", skill.folder)) {
                Ok(p) => vec![Target::Path {
                    path: p,
                    access: Access::Read,
                }],
                Err(_) => Vec::new(),
            }
        } else {
            Vec::new()
        };
        let text = skills::render(skill);
        Ok(Invocation {
            targets,
            job: Box::pin(std::future::ready(Ok(text))),
        })
    }
}

/// What loading said about files that name `wanted` (a skill's folder, a rule's file that
/// is a named pipe or has bad front matter): the reason it is missing, when there is one.
fn skipped_note(warnings: &[String], wanted: &str) -> String {
    let hits: Vec<&str> = warnings
        .iter()
        .filter(|w| !wanted.is_empty() && w.contains(wanted))
        .take(5)
        .map(String::as_str)
        .collect();
    if hits.is_empty() {
        String::new()
    } else {
        format!(" Not loaded: {}.", hits.join("; "))
    }
}
