//! Top-level symbols of source files, from a real parser (tree-sitter): functions, types
//! (struct, enum, trait, class, interface, type alias), and the methods inside impls, classes
//! and interfaces, each with its signature (the declaration up to its body) and line range.
//!
//! Shared by `view_repo_map` (signatures) and the codebase index (chunks that follow code
//! structure). Pure: text in, symbols out.

use std::path::Path;

use tree_sitter::{Language, Node, Parser, Tree};

/// Largest file parsed for symbols, in bytes.
pub const MAX_PARSE_BYTES: usize = 1024 * 1024;
/// Longest signature kept, in characters.
const MAX_SIGNATURE_CHARS: usize = 200;

/// A language toolpilot parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lang {
    Rust,
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Go,
    Java,
    C,
    Cpp,
}

impl Lang {
    /// The language of a file, by its extension.
    pub fn of(path: &Path) -> Option<Lang> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "rs" => Lang::Rust,
            "py" | "pyi" => Lang::Python,
            "js" | "mjs" | "cjs" | "jsx" => Lang::JavaScript,
            "ts" | "mts" | "cts" => Lang::TypeScript,
            "tsx" => Lang::Tsx,
            "go" => Lang::Go,
            "java" => Lang::Java,
            "c" | "h" => Lang::C,
            "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" | "ipp" => Lang::Cpp,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::JavaScript => "JavaScript",
            Lang::TypeScript => "TypeScript",
            Lang::Tsx => "TSX",
            Lang::Go => "Go",
            Lang::Java => "Java",
            Lang::C => "C",
            Lang::Cpp => "C++",
        }
    }

    pub(crate) fn language(self) -> Language {
        match self {
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::Go => tree_sitter_go::LANGUAGE.into(),
            Lang::Java => tree_sitter_java::LANGUAGE.into(),
            Lang::C => tree_sitter_c::LANGUAGE.into(),
            Lang::Cpp => tree_sitter_cpp::LANGUAGE.into(),
        }
    }

    fn spec(self) -> &'static Spec {
        match self {
            Lang::Rust => &RUST,
            Lang::Python => &PYTHON,
            Lang::JavaScript => &JS,
            Lang::TypeScript | Lang::Tsx => &TS,
            Lang::Go => &GO,
            Lang::Java => &JAVA,
            Lang::C => &C,
            Lang::Cpp => &CPP,
        }
    }
}

/// One symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// "function", "method", "struct", "class", "interface", "type", …
    pub kind: &'static str,
    pub name: String,
    /// The declaration up to its body, whitespace collapsed (`pub fn load(p: &Path) -> Config`).
    pub signature: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    pub end_line: usize,
    /// 0 for top-level items, 1 for methods inside a type or impl.
    pub depth: usize,
}

/// Node kinds per language: items (with the symbol kind they are), containers (items whose
/// body holds methods), wrappers (nodes whose inner declaration is the item: `export`,
/// decorators, templates) and scopes (namespaces whose contents are top-level items).
struct Spec {
    items: &'static [(&'static str, &'static str)],
    containers: &'static [&'static str],
    wrappers: &'static [&'static str],
    scopes: &'static [&'static str],
}

static RUST: Spec = Spec {
    items: &[
        ("function_item", "function"),
        ("function_signature_item", "function"),
        ("struct_item", "struct"),
        ("enum_item", "enum"),
        ("union_item", "union"),
        ("trait_item", "trait"),
        ("impl_item", "impl"),
        ("type_item", "type"),
        ("mod_item", "module"),
        ("macro_definition", "macro"),
    ],
    containers: &["trait_item", "impl_item", "mod_item"],
    wrappers: &[],
    scopes: &[],
};

static PYTHON: Spec = Spec {
    items: &[
        ("function_definition", "function"),
        ("class_definition", "class"),
    ],
    containers: &["class_definition"],
    wrappers: &["decorated_definition"],
    scopes: &[],
};

static JS: Spec = Spec {
    items: &[
        ("function_declaration", "function"),
        ("generator_function_declaration", "function"),
        ("class_declaration", "class"),
        ("method_definition", "method"),
        ("lexical_declaration", "function"),
        ("variable_declaration", "function"),
    ],
    containers: &["class_declaration"],
    wrappers: &["export_statement"],
    scopes: &[],
};

static TS: Spec = Spec {
    items: &[
        ("function_declaration", "function"),
        ("generator_function_declaration", "function"),
        ("function_signature", "function"),
        ("class_declaration", "class"),
        ("abstract_class_declaration", "class"),
        ("interface_declaration", "interface"),
        ("type_alias_declaration", "type"),
        ("enum_declaration", "enum"),
        ("method_definition", "method"),
        ("method_signature", "method"),
        ("abstract_method_signature", "method"),
        ("lexical_declaration", "function"),
        ("variable_declaration", "function"),
    ],
    containers: &[
        "class_declaration",
        "abstract_class_declaration",
        "interface_declaration",
    ],
    wrappers: &["export_statement", "ambient_declaration"],
    scopes: &["internal_module", "module"],
};

static GO: Spec = Spec {
    items: &[
        ("function_declaration", "function"),
        ("method_declaration", "method"),
        ("type_declaration", "type"),
    ],
    containers: &[],
    wrappers: &[],
    scopes: &[],
};

static JAVA: Spec = Spec {
    items: &[
        ("class_declaration", "class"),
        ("interface_declaration", "interface"),
        ("enum_declaration", "enum"),
        ("record_declaration", "record"),
        ("annotation_type_declaration", "annotation"),
        ("method_declaration", "method"),
        ("constructor_declaration", "constructor"),
    ],
    containers: &[
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
    ],
    wrappers: &[],
    scopes: &[],
};

static C: Spec = Spec {
    items: &[
        ("function_definition", "function"),
        ("declaration", "function"),
        ("type_definition", "type"),
        ("struct_specifier", "struct"),
        ("union_specifier", "union"),
        ("enum_specifier", "enum"),
    ],
    containers: &[],
    wrappers: &["preproc_ifdef", "preproc_if", "preproc_else"],
    scopes: &["linkage_specification"],
};

static CPP: Spec = Spec {
    items: &[
        ("function_definition", "function"),
        ("declaration", "function"),
        ("field_declaration", "method"),
        ("type_definition", "type"),
        ("alias_declaration", "type"),
        ("class_specifier", "class"),
        ("struct_specifier", "struct"),
        ("union_specifier", "union"),
        ("enum_specifier", "enum"),
    ],
    containers: &["class_specifier", "struct_specifier"],
    wrappers: &[
        "template_declaration",
        "preproc_ifdef",
        "preproc_if",
        "preproc_else",
        "access_specifier",
    ],
    scopes: &["namespace_definition", "linkage_specification"],
};

/// The syntax tree of `source` in `lang`, or `None` when it is larger than
/// [`MAX_PARSE_BYTES`] or the parser cannot be set up. A tree with syntax errors is still
/// returned (its nodes say where: `has_error`).
pub fn parse(lang: Lang, source: &str) -> Option<Tree> {
    if source.len() > MAX_PARSE_BYTES {
        return None;
    }
    let mut parser = Parser::new();
    parser.set_language(&lang.language()).ok()?;
    parser.parse(source, None)
}

/// The symbols of `source` in `lang`, in source order. Empty when the file cannot be parsed
/// (or is larger than [`MAX_PARSE_BYTES`]).
pub fn symbols(lang: Lang, source: &str) -> Vec<Symbol> {
    let Some(tree) = parse(lang, source) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let walker = Walker {
        lang,
        spec: lang.spec(),
        src: source.as_bytes(),
    };
    walker.children(tree.root_node(), 0, &mut out);
    out
}

/// The name a declaration node declares, as the repository map names it (`impl Display for A`
/// → `Display for A`, a C declarator's identifier, a JavaScript variable holding a function),
/// or `None` when `node` is not one of the declarations the map lists.
pub fn declared_name(lang: Lang, node: Node<'_>, source: &str) -> Option<String> {
    let spec = lang.spec();
    let &(_, label) = spec.items.iter().find(|(k, _)| *k == node.kind())?;
    let walker = Walker {
        lang,
        spec,
        src: source.as_bytes(),
    };
    walker.name_of(node, label, 0).map(|(_, name)| name)
}

struct Walker<'a> {
    lang: Lang,
    spec: &'static Spec,
    src: &'a [u8],
}

impl Walker<'_> {
    fn children(&self, node: Node<'_>, depth: usize, out: &mut Vec<Symbol>) {
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            self.visit(child, depth, None, out);
        }
    }

    fn text(&self, n: Node<'_>) -> &str {
        std::str::from_utf8(&self.src[n.byte_range()]).unwrap_or("")
    }

    /// `outer`: the wrapper whose text belongs to the declaration (`export`, `declare`,
    /// `template <…>`), so signatures and line ranges start there.
    fn visit(&self, n: Node<'_>, depth: usize, outer: Option<Node<'_>>, out: &mut Vec<Symbol>) {
        let kind = n.kind();
        if self.spec.wrappers.contains(&kind) {
            let keeps_prefix = matches!(
                kind,
                "export_statement" | "ambient_declaration" | "template_declaration"
            );
            let mut cursor = n.walk();
            for child in n.named_children(&mut cursor) {
                let o = if keeps_prefix {
                    Some(outer.unwrap_or(n))
                } else {
                    outer
                };
                self.visit(child, depth, o, out);
            }
            return;
        }
        if self.spec.scopes.contains(&kind) {
            if let Some(body) = n.child_by_field_name("body") {
                self.children(body, depth, out);
            }
            return;
        }
        let Some(&(_, label)) = self.spec.items.iter().find(|(k, _)| *k == kind) else {
            return;
        };
        // Methods belong inside containers; at the top level only Go has them.
        if depth == 0 && label == "method" && self.lang != Lang::Go && self.lang != Lang::Cpp {
            return;
        }
        let Some((label, name)) = self.name_of(n, label, depth) else {
            return;
        };
        let label = if depth > 0 && label == "function" {
            "method"
        } else {
            label
        };
        let start = outer.unwrap_or(n);
        let mut signature = self.signature(n, start.start_byte());
        if kind == "type_definition" && !signature.contains(&name) {
            // `typedef struct { … } name`: the first line does not say the name.
            signature = format!("{signature} … {name}");
        }
        out.push(Symbol {
            kind: label,
            name,
            signature,
            start_line: start.start_position().row + 1,
            end_line: n.end_position().row + 1,
            depth,
        });
        if depth == 0
            && self.spec.containers.contains(&kind)
            && let Some(body) = n.child_by_field_name("body")
        {
            self.children(body, depth + 1, out);
        }
    }

    /// The symbol's kind and name, or `None` when the node is not a symbol after all (a
    /// variable that is not a function, a declaration that is not a prototype, a `struct`
    /// use without a body).
    fn name_of(
        &self,
        n: Node<'_>,
        label: &'static str,
        depth: usize,
    ) -> Option<(&'static str, String)> {
        match n.kind() {
            "lexical_declaration" | "variable_declaration" => {
                let mut c = n.walk();
                let decl = n
                    .named_children(&mut c)
                    .find(|d| d.kind() == "variable_declarator")?;
                let value = decl.child_by_field_name("value")?;
                let k = match value.kind() {
                    "arrow_function"
                    | "function_expression"
                    | "function"
                    | "generator_function" => "function",
                    "class" => "class",
                    _ => return None,
                };
                Some((k, self.text(decl.child_by_field_name("name")?).to_string()))
            }
            "type_declaration" => {
                let mut c = n.walk();
                let spec = n
                    .named_children(&mut c)
                    .find(|d| matches!(d.kind(), "type_spec" | "type_alias"))?;
                let kind = match spec.child_by_field_name("type").map(|t| t.kind()) {
                    Some("struct_type") => "struct",
                    Some("interface_type") => "interface",
                    _ => "type",
                };
                Some((
                    kind,
                    self.text(spec.child_by_field_name("name")?).to_string(),
                ))
            }
            "struct_specifier" | "union_specifier" | "enum_specifier" | "class_specifier" => {
                n.child_by_field_name("body")?;
                let name = n
                    .child_by_field_name("name")
                    .map(|x| self.text(x).to_string())
                    .unwrap_or_else(|| "(anonymous)".into());
                Some((label, name))
            }
            "declaration" | "field_declaration" => {
                // A prototype (`int f(void);`, a method declared in a class), or a type
                // defined inside the declaration (`struct s { … } x;`).
                if let Some(t) = n.child_by_field_name("type")
                    && matches!(
                        t.kind(),
                        "struct_specifier"
                            | "union_specifier"
                            | "enum_specifier"
                            | "class_specifier"
                    )
                    && t.child_by_field_name("body").is_some()
                {
                    let kind = match t.kind() {
                        "union_specifier" => "union",
                        "enum_specifier" => "enum",
                        "class_specifier" => "class",
                        _ => "struct",
                    };
                    return self.name_of(t, kind, depth);
                }
                let d = n.child_by_field_name("declarator")?;
                let f = find_function_declarator(d)?;
                let name = declarator_name(f, self.src)?;
                Some((if depth > 0 { "method" } else { "function" }, name))
            }
            "function_definition" if self.lang == Lang::C || self.lang == Lang::Cpp => {
                let d = n.child_by_field_name("declarator")?;
                Some((label, declarator_name(d, self.src)?))
            }
            "type_definition" => {
                let mut c = n.walk();
                let d = n.children_by_field_name("declarator", &mut c).last()?;
                Some((label, declarator_name(d, self.src)?))
            }
            "impl_item" => {
                let ty = n.child_by_field_name("type")?;
                let name = match n.child_by_field_name("trait") {
                    Some(tr) => format!("{} for {}", self.text(tr), self.text(ty)),
                    None => self.text(ty).to_string(),
                };
                Some((label, name))
            }
            _ => {
                let name = n
                    .child_by_field_name("name")
                    .map(|x| self.text(x).to_string())?;
                Some((label, name))
            }
        }
    }

    /// The declaration's text up to its body (or its first line when it has none),
    /// whitespace collapsed, trailing `{`/`:` dropped, capped.
    fn signature(&self, n: Node<'_>, start: usize) -> String {
        let end = match n.child_by_field_name("body") {
            Some(b) if b.start_byte() > start => b.start_byte(),
            _ => {
                let text = &self.src[start..n.end_byte()];
                start + text.iter().position(|&b| b == b'\n').unwrap_or(text.len())
            }
        };
        let raw = String::from_utf8_lossy(&self.src[start..end]);
        let mut sig = raw.split_whitespace().collect::<Vec<_>>().join(" ");
        while sig.ends_with('{') || sig.ends_with(':') && self.lang == Lang::Python {
            sig.pop();
            sig = sig.trim_end().to_string();
        }
        if sig.chars().count() > MAX_SIGNATURE_CHARS {
            sig = sig.chars().take(MAX_SIGNATURE_CHARS).collect::<String>() + "…";
        }
        sig
    }
}

/// The `function_declarator` inside a declarator chain (`*f(void)`, `(*p)(int)` is not one).
fn find_function_declarator(mut d: Node<'_>) -> Option<Node<'_>> {
    for _ in 0..8 {
        if d.kind() == "function_declarator" {
            return Some(d);
        }
        d = d.child_by_field_name("declarator")?;
    }
    None
}

/// The identifier at the end of a C/C++ declarator chain (`*name`, `name(args)`, `ns::name`).
pub(crate) fn declarator_name(mut d: Node<'_>, src: &[u8]) -> Option<String> {
    for _ in 0..8 {
        match d.kind() {
            "identifier"
            | "field_identifier"
            | "type_identifier"
            | "qualified_identifier"
            | "destructor_name"
            | "operator_name"
            | "primitive_type" => {
                return std::str::from_utf8(&src[d.byte_range()])
                    .ok()
                    .map(str::to_string);
            }
            _ => d = d.child_by_field_name("declarator")?,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(lang: Lang, src: &str) -> Vec<String> {
        symbols(lang, src)
            .into_iter()
            .map(|s| format!("{}{} {}", "  ".repeat(s.depth), s.kind, s.name))
            .collect()
    }

    #[test]
    fn rust_items_and_methods() {
        let src = "use x;\n/// doc\npub struct Config {\n    a: u32,\n}\nimpl Config {\n    pub fn load(p: &Path)\n        -> Config {\n        todo!()\n    }\n}\ntrait T { fn t(&self); }\nenum E { A }\ntype R = u8;\nfn main() {}\nconst X: u8 = 1;\n";
        assert_eq!(
            names(Lang::Rust, src),
            [
                "struct Config",
                "impl Config",
                "  method load",
                "trait T",
                "  function t",
                "enum E",
                "type R",
                "function main"
            ]
            .map(String::from)
            .to_vec()
            .iter()
            .map(|s| s.replace("  function t", "  method t"))
            .collect::<Vec<_>>()
        );
        let syms = symbols(Lang::Rust, src);
        assert_eq!(syms[0].signature, "pub struct Config");
        assert_eq!((syms[0].start_line, syms[0].end_line), (3, 5));
        assert_eq!(syms[2].signature, "pub fn load(p: &Path) -> Config");
    }

    #[test]
    fn python_classes_and_decorators() {
        let src = "import os\n@dataclass\nclass A(B):\n    def m(self, x):\n        pass\n    @property\n    def p(self):\n        return 1\n\nasync def run(\n    a,\n):\n    pass\n";
        assert_eq!(
            names(Lang::Python, src),
            ["class A", "  method m", "  method p", "function run"]
        );
        assert_eq!(symbols(Lang::Python, src)[0].signature, "class A(B)");
        assert_eq!(
            symbols(Lang::Python, src)[3].signature,
            "async def run( a, )"
        );
    }

    #[test]
    fn c_prototypes_structs_and_typedefs() {
        let src = "#include <x.h>\nstruct point { int x; };\ntypedef struct { int y; } pt;\nint add(int a, int b);\nstatic int *mk(void) { return 0; }\nint counter = 0;\n";
        assert_eq!(
            names(Lang::C, src),
            ["struct point", "type pt", "function add", "function mk"]
        );
    }
}
