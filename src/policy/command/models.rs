//! What one simple command does with its arguments: the dispatcher over the command models,
//! the facts a model reports, and the small models (read-only tools, system tools, builds,
//! installs, interpreters).

use super::parse::Word;
use super::scan::{self, Getopt, Item};
use super::{Class, Verdict};
use super::{archive, awk, files, git, search, sed};

/// One invocation to judge: the words of the command (wrappers already looked through).
pub(crate) struct Inv {
    pub words: Vec<Word>,
    /// Arguments are appended that nobody can see here (the command runs under `xargs`).
    pub open_tail: bool,
}

impl Inv {
    /// The command name without a path (`/usr/bin/sudo` → `sudo`).
    pub fn name(&self) -> &str {
        let n = self.words.first().map_or("", |w| w.text.as_str());
        n.rsplit('/').next().unwrap_or(n)
    }

    pub fn args(&self) -> &[Word] {
        self.words.get(1..).unwrap_or(&[])
    }

    pub fn arg(&self, i: usize) -> &str {
        self.args().get(i).map_or("", |w| w.text.as_str())
    }

    /// The argument texts.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.args().iter().map(|w| w.text.as_str())
    }

    /// A short option letter in any cluster (`-rf` has `r`), or the long option (or a prefix
    /// of it).
    pub fn has_flag(&self, c: char, long: &str) -> bool {
        self.texts().any(|w| match w.strip_prefix("--") {
            Some(name) => scan::is_long(name.split('=').next().unwrap_or(""), long),
            None => w.starts_with('-') && w.len() > 1 && w[1..].contains(c),
        })
    }
}

/// Where the paths a write touches are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Targets {
    /// Not a write.
    None,
    /// These paths, as written.
    Known(Vec<String>),
    /// Paths nobody can tell before it runs (an archive's members, an expansion).
    Unknown,
}

/// One thing a command does, with its verdict.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub verdict: Verdict,
    pub class: Class,
    pub reason: String,
    pub targets: Targets,
}

/// What a model found out about one command.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub findings: Vec<Finding>,
    /// Words the command reads as files (checked against the sensitive files).
    pub reads: Vec<String>,
    /// Paths it writes or deletes (checked against the protected paths).
    pub touched: Vec<String>,
}

impl Facts {
    pub fn add(&mut self, verdict: Verdict, class: Class, reason: impl Into<String>) {
        self.findings.push(Finding {
            verdict,
            class,
            reason: reason.into(),
            targets: Targets::None,
        });
    }

    pub fn allow(&mut self, class: Class, reason: impl Into<String>) {
        self.add(Verdict::Allow, class, reason);
    }

    pub fn ask(&mut self, class: Class, reason: impl Into<String>) {
        self.add(Verdict::Ask, class, reason);
    }

    pub fn deny(&mut self, class: Class, reason: impl Into<String>) {
        self.add(Verdict::Deny, class, reason);
    }

    /// It writes these paths.
    pub fn writes(&mut self, targets: Vec<String>, reason: impl Into<String>) {
        self.touched.extend(targets.iter().cloned());
        let targets = if targets.is_empty() || targets.iter().any(|t| t.contains('`')) {
            Targets::Unknown
        } else {
            Targets::Known(targets)
        };
        self.findings.push(Finding {
            verdict: Verdict::Ask,
            class: Class::Writes,
            reason: reason.into(),
            targets,
        });
    }

    /// It writes paths that cannot be known here.
    pub fn writes_unknown(&mut self, reason: impl Into<String>) {
        self.findings.push(Finding {
            verdict: Verdict::Ask,
            class: Class::Writes,
            reason: reason.into(),
            targets: Targets::Unknown,
        });
    }

    /// It deletes these paths.
    pub fn deletes(&mut self, targets: Vec<String>, reason: impl Into<String>) {
        self.touched.extend(targets);
        self.ask(Class::Deletes, reason);
    }

    pub fn read(&mut self, word: &str) {
        self.reads.push(word.to_string());
    }

    /// Every argument a generic reader could open.
    pub fn read_args(&mut self, words: &[Word]) {
        self.reads.extend(scan::path_like(words));
    }

    /// An argument that starts with an expansion, before `--`, or arguments appended by
    /// `xargs`, could be an option such as `what` (argument injection).
    pub fn injection(&mut self, inv: &Inv, class: Class, what: &str) {
        let name = inv.name();
        if let Some(w) = scan::open_before_end(inv.args()) {
            self.ask(
                class,
                format!(
                    "the argument `{}` begins with an expansion or a glob, which could turn into \
                     an option of {name} such as {what}",
                    w.text
                ),
            );
        }
        if inv.open_tail {
            self.ask(
                class,
                format!(
                    "xargs appends arguments read from its input, which could be options of \
                     {name} such as {what}"
                ),
            );
        }
    }
}

pub(crate) const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "python",
    "python2",
    "python3",
    "ruby",
    "perl",
    "php",
    "node",
    "nodejs",
    "deno",
    "bun",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "pwsh",
    "powershell",
    "osascript",
    "Rscript",
    "julia",
    "java",
    "jshell",
    "groovy",
    "scala",
    "elixir",
    "erl",
    "ghci",
    "runghc",
    "swift",
    "npx",
    "pnpx",
    "bunx",
    "uvx",
    "vim",
    "vi",
    "nvim",
    "emacs",
    "nano",
    "ed",
    "ex",
    "less",
    "more",
    "most",
    "man",
    "gdb",
    "lldb",
    "strace",
    "ltrace",
    "valgrind",
    "perf",
    "make-shell",
    "expect",
    "script",
    "watch",
    "parallel",
    "source",
    ".",
    "trap",
    "sudoedit",
    "open",
    "xdg-open",
];
/// Shells whose `-c` script is read by the parser too.
pub(crate) const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh"];
pub(crate) const NET_TOOLS: &[&str] = &[
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "telnet",
    "ssh",
    "scp",
    "sftp",
    "ftp",
    "tftp",
    "rsync",
    "socat",
    "http",
    "https",
    "xh",
    "aria2c",
    "ping",
    "dig",
    "nslookup",
    "host",
    "whois",
    "traceroute",
    "nmap",
    "lftp",
    "mosh",
];
/// Commands that do not open the files their arguments name (so the secrets check does not
/// apply to their words).
const NO_CONTENT: &[&str] = &[
    "echo", "printf", "ls", "dir", "stat", "test", "[", "basename", "dirname", "realpath",
    "readlink", "which", "whereis", "type", "cd", "pushd", "popd", "mkdir", "rmdir", "touch", "du",
    "df", "true", "false", "sleep", "seq", "pwd", "whoami", "id", "uname", "date", "hostname",
    "uptime", "nproc", "free", "ps", "tput", "locale", "getconf", "printenv", "file", "rm",
    "unlink", "ln", "chmod", "chown", "chgrp", "find", "fd", "tree", "command", "kill", "export",
    "unset", "set", "alias", "git", "cargo", "make", "npm",
];

/// Whether the secrets check applies to this command's words.
pub(crate) fn reads_contents(name: &str) -> bool {
    !NO_CONTENT.contains(&name)
}

/// Read-only commands with nothing to model beyond their name.
const READ_ONLY: &[&str] = &[
    "ls",
    "dir",
    "vdir",
    "pwd",
    "whoami",
    "id",
    "groups",
    "uname",
    "uptime",
    "df",
    "du",
    "free",
    "ps",
    "pgrep",
    "pidof",
    "which",
    "whereis",
    "type",
    "stat",
    "wc",
    "head",
    "tail",
    "cat",
    "nl",
    "od",
    "strings",
    "echo",
    "true",
    "false",
    "grep",
    "egrep",
    "fgrep",
    "cut",
    "tr",
    "diff",
    "cmp",
    "comm",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "md5sum",
    "b2sum",
    "cksum",
    "sum",
    "printenv",
    "seq",
    "sleep",
    "column",
    "fold",
    "fmt",
    "expand",
    "unexpand",
    "rev",
    "tac",
    "hexdump",
    "base64",
    "base32",
    "basenc",
    "cd",
    "pushd",
    "popd",
    "nproc",
    "lscpu",
    "lsblk",
    "locale",
    "tput",
    "getconf",
    "zcat",
    "bzcat",
    "xzcat",
    "zstdcat",
    "lz4cat",
    "paste",
    "join",
    "numfmt",
    "factor",
    "expr",
    "tsort",
    "look",
    "arch",
    "tty",
    "logname",
    "users",
    "who",
    "w",
    "last",
    "lsof",
    "env",
    "pr",
    "ptx",
    "shuf",
    "jq",
    "gojq",
    "wait",
    ":",
    "cal",
    "ncal",
    "md5",
    "shasum",
    "sha1",
    "hd",
    "zgrep",
    "zegrep",
    "zfgrep",
    "xzgrep",
    "bzgrep",
    "zdiff",
    "zcmp",
    "diff3",
    "sdiff",
    "iconv",
    "dos2unix-check",
    "getent",
    "lsattr",
    "namei",
    "mountpoint",
    "findmnt",
    "lsmod",
    "vmstat",
    "iostat",
    "mpstat",
    "top",
    "htop",
    "nvidia-smi",
    "ulimit",
    "umask",
    "times",
    "jobs",
    "dirs",
    "help",
    "caller",
];

/// Judges one command; `false` when no model knows it.
pub(crate) fn judge(inv: &Inv, f: &mut Facts) -> bool {
    let name = inv.name();
    if name.is_empty() {
        return false;
    }
    if privilege(inv, f) || destructive(inv, f) || system(inv, f) {
        return true;
    }
    match name {
        "sed" | "gsed" => sed::judge(inv, f),
        "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk" => awk::judge(inv, f),
        "git" => git::judge(inv, f),
        "find" | "gfind" => search::find(inv, f),
        "fd" | "fdfind" => search::fd(inv, f),
        "rg" => search::rg(inv, f),
        "ag" => search::ag(inv, f),
        "ack" | "ack-grep" => search::ack(inv, f),
        "tar" | "gtar" | "bsdtar" => archive::tar(inv, f),
        "zip" => archive::zip(inv, f),
        "unzip" => archive::unzip(inv, f),
        "gzip" | "gunzip" | "bzip2" | "bunzip2" | "xz" | "unxz" | "lzma" | "unlzma" | "zstd"
        | "unzstd" | "lz4" | "pigz" | "unpigz" | "brotli" | "compress" | "uncompress" | "lzip"
        | "zstdmt" => archive::compressor(inv, f),
        "cp" | "mv" | "ln" | "install" | "touch" | "mkdir" | "tee" | "truncate" | "dd"
        | "split" | "csplit" | "rm" | "rmdir" | "unlink" | "chmod" | "chown" | "chgrp"
        | "mkfifo" | "mknod" | "rsync-local" | "patch" | "mktemp" | "shred" => files::judge(inv, f),
        "sort" => files::sort(inv, f),
        "uniq" => files::uniq(inv, f),
        "xxd" => files::xxd(inv, f),
        "tree" => files::tree(inv, f),
        "yq" => files::yq(inv, f),
        "file" => files::file(inv, f),
        "date" => date(inv, f),
        "hostname" => hostname(inv, f),
        "test" | "[" => test(inv, f),
        "printf" => printf(inv, f),
        "enable" => enable(inv, f),
        "export" | "set" | "unset" | "alias" | "unalias" | "declare" | "typeset" | "local"
        | "readonly" | "let" | "shift" | "getopts" => {
            if inv.args().is_empty() {
                f.allow(Class::ReadOnly, format!("`{name}` alone only prints"));
            } else {
                f.ask(
                    Class::EnvVars,
                    format!(
                        "`{name}` changes shell variables, options or aliases, which can change \
                         which programs later commands run"
                    ),
                );
            }
            true
        }
        _ if READ_ONLY.contains(&name) => {
            f.allow(Class::ReadOnly, "a read-only command");
            if reads_contents(name) {
                f.read_args(inv.args());
            }
            true
        }
        _ => others(inv, f),
    }
}

fn privilege(inv: &Inv, f: &mut Facts) -> bool {
    let hit = matches!(
        inv.name(),
        "sudo"
            | "su"
            | "doas"
            | "pkexec"
            | "runas"
            | "gsudo"
            | "run0"
            | "sudo-rs"
            | "setpriv"
            | "capsh"
    );
    if hit {
        f.deny(
            Class::Privilege,
            "privilege escalation (sudo, su, doas, pkexec) is never run by the agent",
        );
    }
    hit
}

const SYSTEM_PATHS: &[&str] = &[
    "/", "/*", "~", "~/", "~/*", "$HOME", "${HOME}", "/usr", "/etc", "/bin", "/sbin", "/lib",
    "/lib64", "/boot", "/var", "/home", "/root", "/opt", "/dev", "/proc", "/sys", "..", "../", "*",
    ".", "./", "./*",
];

fn destructive(inv: &Inv, f: &mut Facts) -> bool {
    let name = inv.name();
    if name == "rm" && (inv.has_flag('r', "recursive") || inv.has_flag('R', "")) {
        let hit = inv.texts().any(|w| {
            let t = w.trim_end_matches("/*").trim_end_matches('/');
            (!w.starts_with('-') && (SYSTEM_PATHS.contains(&t) || t.is_empty()))
                || SYSTEM_PATHS.contains(&w)
                || [
                    "/usr/", "/etc/", "/bin/", "/boot/", "/lib/", "/sbin/", "/home/",
                ]
                .iter()
                .any(|p| w.starts_with(p) && w.matches('/').count() <= 2)
                || w == "--no-preserve-root"
        });
        if hit {
            f.deny(
                Class::Destructive,
                "recursive deletion of a system folder, the home folder or everything",
            );
            return true;
        }
    }
    let disk = name.starts_with("mkfs")
        || matches!(
            name,
            "fdisk" | "sfdisk" | "cfdisk" | "parted" | "wipefs" | "shred" | "blkdiscard" | "mkswap"
        )
        || (name == "dd" && inv.texts().any(|w| w.starts_with("of=/dev/")));
    if disk {
        f.deny(Class::Destructive, "formatting or overwriting a disk");
        return true;
    }
    if matches!(name, "chmod" | "chown" | "chgrp")
        && inv.texts().any(|w| {
            w == "/"
                || [
                    "/etc", "/usr", "/bin", "/sbin", "/lib", "/boot", "/var", "/home",
                ]
                .iter()
                .any(|p| w.starts_with(p))
        })
    {
        f.deny(
            Class::Destructive,
            "changing permissions or owners of system folders",
        );
        return true;
    }
    false
}

fn system(inv: &Inv, f: &mut Facts) -> bool {
    let name = inv.name();
    let deny = matches!(
        name,
        "shutdown"
            | "reboot"
            | "halt"
            | "poweroff"
            | "insmod"
            | "rmmod"
            | "modprobe"
            | "iptables"
            | "ip6tables"
            | "nft"
            | "kexec"
            | "swapoff"
    ) || (matches!(name, "init" | "telinit") && matches!(inv.arg(0), "0" | "6"))
        || (name == "systemctl"
            && matches!(
                inv.arg(0),
                "poweroff" | "reboot" | "halt" | "kexec" | "suspend" | "hibernate"
            ));
    if deny {
        f.deny(
            Class::System,
            "shutting down the machine, kernel modules or the firewall",
        );
        return true;
    }
    let ask = matches!(
        name,
        "kill"
            | "killall"
            | "pkill"
            | "systemctl"
            | "service"
            | "launchctl"
            | "docker"
            | "podman"
            | "kubectl"
            | "helm"
            | "terraform"
            | "vagrant"
            | "aws"
            | "gcloud"
            | "az"
            | "crontab"
            | "at"
            | "batch"
            | "useradd"
            | "userdel"
            | "usermod"
            | "groupadd"
            | "passwd"
            | "chpasswd"
            | "mount"
            | "umount"
            | "chroot"
            | "nsenter"
            | "unshare"
            | "renice"
            | "sysctl"
            | "timedatectl"
            | "hostnamectl"
            | "loginctl"
            | "ip"
            | "ifconfig"
            | "route"
            | "disown"
            | "suspend"
            | "logout"
            | "exit"
    );
    if ask {
        if name == "exit" || name == "logout" {
            f.allow(Class::ReadOnly, "ends the shell");
            return true;
        }
        f.ask(
            Class::System,
            "processes, services, containers and cloud resources outside the workspace",
        );
        return true;
    }
    false
}

fn date(inv: &Inv, f: &mut Facts) -> bool {
    let g = Getopt {
        short_arg: "dfrsI",
        short_opt: "",
        long_arg: &["date", "file", "reference", "set"],
        stop_at_operand: false,
    };
    let (items, _) = scan::getopt(inv.args(), &g);
    for it in &items {
        match it {
            Item::Short { c: 's', .. } => {
                f.ask(Class::System, "`date -s` sets the system clock");
            }
            Item::Long { name, .. } if scan::is_long(name, "set") && name.len() >= 2 => {
                f.ask(Class::System, "`date --set` sets the system clock");
            }
            Item::Short {
                c: 'f' | 'r',
                value,
            } => f.read(scan::text(value)),
            Item::Operand(i) if !inv.args()[*i].text.starts_with('+') => {
                f.ask(
                    Class::System,
                    "`date` with a date operand (not +FORMAT) sets the system clock",
                );
            }
            _ => {}
        }
    }
    f.allow(Class::ReadOnly, "a read-only command");
    true
}

fn hostname(inv: &Inv, f: &mut Facts) -> bool {
    let sets = inv.texts().any(|w| {
        !w.starts_with('-')
            || matches!(w, "-F" | "-b" | "--boot")
            || w.starts_with("--file")
            || w.starts_with("-F")
    });
    if sets {
        f.ask(Class::System, "`hostname NAME` changes the machine's name");
    } else {
        f.allow(Class::ReadOnly, "a read-only command");
    }
    true
}

fn test(inv: &Inv, f: &mut Facts) -> bool {
    // bash evaluates an array subscript in `test -v 'a[$(cmd)]'`.
    let v = inv
        .args()
        .windows(2)
        .any(|w| w[0].text == "-v" && (w[1].text.contains('[') || w[1].dynamic));
    if v {
        f.ask(
            Class::Executes,
            "`test -v` with an array subscript: bash evaluates the subscript, which can run \
             commands",
        );
    } else {
        f.allow(Class::ReadOnly, "a read-only command");
    }
    true
}

fn printf(inv: &Inv, f: &mut Facts) -> bool {
    let v = inv
        .args()
        .windows(2)
        .any(|w| w[0].text == "-v" && (w[1].text.contains('[') || w[1].dynamic));
    if v {
        f.ask(
            Class::Executes,
            "`printf -v` into an array element: bash evaluates the subscript, which can run \
             commands",
        );
    } else {
        f.allow(Class::ReadOnly, "a read-only command");
    }
    true
}

fn enable(inv: &Inv, f: &mut Facts) -> bool {
    if inv.texts().any(|w| w.starts_with('-') && w.contains('f')) {
        f.ask(
            Class::Executes,
            "`enable -f` makes bash load a shared library, which runs its code",
        );
    } else if inv.args().is_empty() || inv.texts().all(|w| w == "-a" || w == "-p") {
        f.allow(Class::ReadOnly, "`enable` alone lists the builtins");
    } else {
        f.ask(
            Class::EnvVars,
            "`enable` turns shell builtins on or off, which changes which programs later \
             commands run",
        );
    }
    true
}

fn is_version_or_help(inv: &Inv) -> bool {
    inv.args().len() == 1
        && matches!(
            inv.arg(0),
            "--version" | "-V" | "-v" | "--help" | "-h" | "version" | "-version"
        )
}

/// Installs, network tools, interpreters, builds, project scripts.
fn others(inv: &Inv, f: &mut Facts) -> bool {
    let name = inv.name();
    let sub = inv.arg(0);
    if install(inv) {
        f.ask(
            Class::Install,
            "installing or removing packages changes the machine or the project's dependencies",
        );
        return true;
    }
    if NET_TOOLS.contains(&name)
        || (matches!(name, "docker" | "podman") && matches!(sub, "pull" | "push" | "login"))
    {
        f.ask(
            Class::Network,
            "network access (downloads, uploads, remote shells)",
        );
        return true;
    }
    if INTERPRETERS.contains(&name) {
        f.read_args(inv.args());
        if is_version_or_help(inv) {
            f.allow(Class::ReadOnly, "prints its version or help");
        } else if inv.args().is_empty() && !matches!(name, "eval" | "exec" | "source" | ".") {
            f.ask(
                Class::Executes,
                "an interpreter, shell, editor or pager reading its input, which runs code or \
                 other programs",
            );
        } else {
            f.ask(
                Class::Executes,
                "an interpreter, shell, editor or pager running a script, inline code or other \
                 programs",
            );
        }
        return true;
    }
    if build(inv) {
        f.allow(Class::Build, "building, checking or testing the project");
        return true;
    }
    let full = inv.words.first().map_or("", |w| w.text.as_str());
    if (full.starts_with("./") || full.starts_with("../") || full.starts_with('/'))
        && !full.ends_with("/gradlew")
        && !full.ends_with("/mvnw")
    {
        f.ask(
            Class::Executes,
            "a script or program of the project run directly",
        );
        return true;
    }
    false
}

fn install(inv: &Inv) -> bool {
    let name = inv.name();
    let sub = inv.arg(0);
    let install_step = (matches!(name, "make" | "gmake" | "ninja" | "meson")
        && inv.texts().any(|w| matches!(w, "install" | "uninstall")))
        || (matches!(name, "npm" | "pnpm" | "yarn" | "bun")
            && inv.texts().any(|w| {
                matches!(
                    w,
                    "preinstall"
                        | "install"
                        | "postinstall"
                        | "prepare"
                        | "prepublish"
                        | "prepublishOnly"
                )
            }));
    install_step
        || (matches!(name, "npm" | "pnpm" | "yarn" | "bun")
            && matches!(
                sub,
                "install"
                    | "i"
                    | "add"
                    | "ci"
                    | "uninstall"
                    | "remove"
                    | "rm"
                    | "update"
                    | "upgrade"
                    | "link"
                    | "publish"
                    | "dlx"
                    | "x"
            ))
        || (matches!(
            name,
            "pip" | "pip3" | "pipx" | "uv" | "poetry" | "conda" | "mamba" | "gem" | "composer"
        ) && matches!(
            sub,
            "install" | "uninstall" | "add" | "remove" | "update" | "upgrade" | "sync" | "publish"
        ))
        || (name == "cargo"
            && matches!(
                sub,
                "install" | "uninstall" | "add" | "remove" | "update" | "publish" | "login"
            ))
        || (name == "go" && matches!(sub, "install" | "get"))
        || matches!(
            name,
            "apt"
                | "apt-get"
                | "dpkg"
                | "yum"
                | "dnf"
                | "zypper"
                | "pacman"
                | "apk"
                | "brew"
                | "port"
                | "snap"
                | "flatpak"
                | "choco"
                | "scoop"
                | "winget"
                | "rustup"
                | "nvm"
        )
        || (matches!(name, "python" | "python3")
            && sub == "-m"
            && matches!(inv.arg(1), "pip" | "ensurepip"))
}

fn build(inv: &Inv) -> bool {
    let name = inv.name();
    let sub = inv.arg(0);
    (name == "cargo"
        && matches!(
            sub,
            "build"
                | "b"
                | "check"
                | "c"
                | "test"
                | "t"
                | "clippy"
                | "fmt"
                | "doc"
                | "bench"
                | "tree"
                | "metadata"
                | "run"
                | "r"
                | "nextest"
                | "--version"
                | "-V"
        ))
        || (matches!(name, "npm" | "pnpm" | "yarn" | "bun")
            && matches!(
                sub,
                "test"
                    | "t"
                    | "build"
                    | "start"
                    | "lint"
                    | "run"
                    | "exec"
                    | "ls"
                    | "list"
                    | "outdated"
                    | "--version"
                    | "-v"
            )
            && !inv.texts().any(|w| {
                matches!(
                    w,
                    "preinstall"
                        | "install"
                        | "postinstall"
                        | "prepare"
                        | "prepublish"
                        | "prepublishOnly"
                )
            }))
        || (matches!(name, "make" | "gmake" | "ninja" | "ctest" | "meson")
            && !inv.texts().any(|w| matches!(w, "install" | "uninstall")))
        || (name == "cmake" && matches!(sub, "--build" | "-S" | "-B" | ".." | "."))
        || (name == "go"
            && matches!(
                sub,
                "build" | "test" | "vet" | "fmt" | "run" | "list" | "version" | "env" | "mod"
            ))
        || (matches!(name, "mvn" | "gradle" | "gradlew" | "mvnw")
            && inv
                .texts()
                .all(|w| !matches!(w, "deploy" | "publish" | "install")))
        || matches!(
            name,
            "pytest"
                | "tox"
                | "nox"
                | "rustc"
                | "rustfmt"
                | "gcc"
                | "cc"
                | "clang"
                | "g++"
                | "c++"
                | "tsc"
                | "eslint"
                | "prettier"
                | "ruff"
                | "mypy"
                | "black"
                | "flake8"
                | "javac"
                | "dotnet"
        )
}
