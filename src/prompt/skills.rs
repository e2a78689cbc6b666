//! Skills: `SKILL.md` files (front matter with a non-empty `name` and `description`) found
//! below the workspace's `.continue/skills` and `.claude/skills` and the global folder's
//! `skills`, as Continue's `loadMarkdownSkills` finds them. A skill's other files are its
//! supporting files.

use std::path::{Path, PathBuf};

use super::frontmatter::{self, FrontMatter};
use super::rules::{files_below, files_below_ws, read_small, read_small_ws};
use crate::workspace::Workspace;

/// Most supporting files listed for one skill.
pub const MAX_SUPPORTING: usize = 100;

#[derive(Debug, Clone)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub body: String,
    /// The skill's folder: workspace-relative when inside the workspace (`in_workspace`),
    /// else absolute.
    pub folder: String,
    pub in_workspace: bool,
    /// Other files of the skill's folder, relative to it, sorted.
    pub files: Vec<String>,
}

/// The skills found, and the `SKILL.md` files that were skipped (and why).
#[derive(Debug, Clone, Default)]
pub struct Skills {
    pub skills: Vec<Skill>,
    pub warnings: Vec<String>,
}

impl Skills {
    pub fn load(ws: &Workspace, global: Option<&Path>) -> Skills {
        let mut out = Skills::default();
        let mut roots: Vec<(PathBuf, bool)> = vec![
            (PathBuf::from(".continue/skills"), true),
            (PathBuf::from(".claude/skills"), true),
        ];
        if let Some(g) = global {
            roots.push((g.join("skills"), false));
        }
        for (root, in_ws) in roots {
            // Workspace folders are read beneath the root through no symbolic link; the
            // global folder is the user's own.
            let files = if in_ws {
                files_below_ws(ws, &root, 6, 2_000, &mut out.warnings)
            } else {
                files_below(&root, 6, 2_000, &mut out.warnings)
            };
            for path in files
                .iter()
                .filter(|p| p.file_name().is_some_and(|n| n == "SKILL.md"))
            {
                let text = if in_ws {
                    read_small_ws(ws, path, &mut out.warnings)
                } else {
                    read_small(path, &mut out.warnings)
                };
                let Some(text) = text else {
                    continue;
                };
                let dir = path.parent().unwrap_or(&root).to_path_buf();
                match parse_skill(&text) {
                    Ok((name, description, body)) => {
                        if out.skills.iter().any(|s| s.name == name) {
                            out.warnings.push(format!(
                                "{} was skipped: a skill named {name:?} was found first",
                                path.display()
                            ));
                            continue;
                        }
                        let mut supporting: Vec<String> = files
                            .iter()
                            .filter(|f| f.starts_with(&dir) && *f != path)
                            .filter_map(|f| f.strip_prefix(&dir).ok())
                            .map(|f| f.to_string_lossy().into_owned())
                            .collect();
                        supporting.truncate(MAX_SUPPORTING);
                        let folder = dir.to_string_lossy().into_owned();
                        out.skills.push(Skill {
                            name,
                            description,
                            body,
                            folder,
                            in_workspace: in_ws,
                            files: supporting,
                        });
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "skill skipped");
                        out.warnings
                            .push(format!("{} was skipped: {e}", path.display()));
                    }
                }
            }
        }
        out
    }

    pub fn find(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name).or_else(|| {
            self.skills
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(name.trim()))
        })
    }
}

/// `(name, description, body)` of a `SKILL.md`; both fields are required and non-empty.
pub fn parse_skill(text: &str) -> Result<(String, String, String), String> {
    let (yaml, body) = frontmatter::split(text);
    let Some(yaml) = yaml else {
        return Err("it has no front matter (`---` block with `name` and `description`)".into());
    };
    let fm = FrontMatter::parse(yaml)?;
    let name = fm
        .string("name")
        .ok_or("its front matter has no `name` (required, non-empty)")?;
    let description = fm
        .string("description")
        .ok_or("its front matter has no `description` (required, non-empty)")?;
    Ok((name, description, body.trim().to_string()))
}

/// What `read_skill` returns: the body, then the supporting files and how to read them.
pub fn render(skill: &Skill) -> String {
    let mut out = if skill.body.is_empty() {
        format!(
            "(The skill \"{}\" has no instructions besides its description: {})",
            skill.name, skill.description
        )
    } else {
        skill.body.clone()
    };
    if !skill.files.is_empty() {
        out.push_str("\n\n## Supporting files\n\n");
        if skill.in_workspace {
            out.push_str(&format!(
                "The skill's folder `{}` also contains these files. Read one with read_file when \
                 the instructions above need it (paths are relative to the workspace root):\n",
                skill.folder
            ));
            for f in &skill.files {
                out.push_str(&format!("- {}/{f}\n", skill.folder));
            }
        } else {
            out.push_str(&format!(
                "The skill's folder `{}` (outside the workspace, so read_file cannot open it) \
                 also contains these files; if the instructions depend on one, ask the user for \
                 its content:\n",
                skill.folder
            ));
            for f in &skill.files {
                out.push_str(&format!("- {f}\n"));
            }
        }
        if skill.files.len() == MAX_SUPPORTING {
            out.push_str(&format!(
                "(only the first {MAX_SUPPORTING} files are listed)\n"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skills_need_a_name_and_a_description() {
        assert_eq!(
            parse_skill("---\nname: pdf\ndescription: Work with PDFs\n---\n\nSteps.\n").unwrap(),
            ("pdf".into(), "Work with PDFs".into(), "Steps.".into())
        );
        assert!(
            parse_skill("Steps.")
                .unwrap_err()
                .contains("no front matter")
        );
        assert!(
            parse_skill("---\nname: pdf\n---\nx")
                .unwrap_err()
                .contains("`description`")
        );
        assert!(
            parse_skill("---\nname: ' '\ndescription: d\n---\nx")
                .unwrap_err()
                .contains("`name`")
        );
    }
}
