//! `fjord lab install-peers`: installs the programs the lab compares fjord
//! with, by package name, skipping whatever is already there.
//!
//! What to install is `crates/lab/install.list`, the list `./dev setup`
//! reads too (it runs before anything is built). [`plan`] looks at the
//! machine and lists one step per item of it, each either needed or
//! already done:
//!
//! 1. `apt-get update && apt-get install -y` of the missing Debian
//!    packages (checked with `dpkg -s`; `DEBIAN_FRONTEND=noninteractive`);
//! 2. `go install MODULE` for each Go program (wireguard-go, which lands as
//!    `~/go/bin/wireguard`, named after its module; the lab's driver finds
//!    that name);
//! 3. `cargo install CRATE --locked` for each Rust program (boringtun-cli,
//!    vpncloud).
//!
//! [`run`] carries the needed steps out one after the other. A failing step
//! does not stop the others (a missing Go toolchain should not cost the
//! user OpenVPN); each one's outcome lands in the [`Summary`], with the
//! tail of the command's output as the reason. Nothing here panics or
//! exits: the binary decides what a failure means.
//!
//! Progress: one plain line per step on stderr (`[4/4] cargo install
//! vpncloud --locked ... done in 192 s`), with a spinner on the same line
//! while the step runs when stderr is a terminal.

use std::fmt;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::systems;

/// What to install, shared with `./dev setup`; see the file's header.
const INSTALL_LIST: &str = include_str!("../install.list");

/// One line of [`INSTALL_LIST`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Debian(&'static str),
    Go {
        module: &'static str,
        program: &'static str,
    },
    Cargo(&'static str),
}

/// The items of [`INSTALL_LIST`], in order; a line that is not one is
/// returned as it is.
fn install_list() -> impl Iterator<Item = Result<Item, &'static str>> {
    INSTALL_LIST
        .lines()
        .map(|line| line.split('#').next().unwrap_or(line).trim())
        .filter(|line| !line.is_empty())
        .map(|line| {
            let words: Vec<&'static str> = line.split_whitespace().collect();
            match words[..] {
                ["apt", package] => Ok(Item::Debian(package)),
                ["go", module, program] => Ok(Item::Go { module, program }),
                ["cargo", crate_name] => Ok(Item::Cargo(crate_name)),
                _ => Err(line),
            }
        })
}

/// Debian packages the lab uses, by package name.
pub fn debian_packages() -> Vec<&'static str> {
    install_list()
        .filter_map(|item| match item {
            Ok(Item::Debian(package)) => Some(package),
            _ => None,
        })
        .collect()
}
/// Lines of a failed command's output quoted as the reason.
const REASON_LINES: usize = 5;

/// One installation step.
#[derive(Debug, Clone)]
pub struct Step {
    /// The command line as shown (`cargo install vpncloud --locked`).
    pub title: String,
    /// Whether the step has anything to do; `false` means what it
    /// installs was already present when planned.
    pub needed: bool,
    /// Run in order; the first failure ends the step.
    commands: Vec<CommandLine>,
    /// Why the step cannot run here (its tool is missing, not root).
    blocker: Option<String>,
    /// What must hold once the step has succeeded.
    verify: Verify,
}

#[derive(Debug, Clone)]
struct CommandLine {
    program: String,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

impl CommandLine {
    fn new(program: &str, args: &[&str]) -> Self {
        Self {
            program: program.to_string(),
            args: args.iter().map(|arg| arg.to_string()).collect(),
            env: Vec::new(),
        }
    }

    /// Runs to completion; an error quotes the end of the output.
    fn run(&self) -> Result<(), String> {
        let mut command = Command::new(&self.program);
        command.args(&self.args).stdin(Stdio::null());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let output = command
            .output()
            .map_err(|error| format!("could not start {}: {error}", self.program))?;
        if output.status.success() {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Err(format!(
            "{}: {}",
            output.status,
            last_lines(&text, REASON_LINES)
        ))
    }
}

impl fmt::Display for CommandLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.program)?;
        self.args.iter().try_for_each(|arg| write!(f, " {arg}"))
    }
}

#[derive(Debug, Clone)]
enum Verify {
    Nothing,
    DebianPackages(Vec<String>),
    Program {
        name: &'static str,
        fallbacks: Vec<PathBuf>,
    },
}

impl Verify {
    /// `None` if it holds, else what is missing.
    fn missing(&self) -> Option<String> {
        match self {
            Verify::Nothing => None,
            Verify::DebianPackages(packages) => {
                let missing: Vec<&str> = packages
                    .iter()
                    .map(String::as_str)
                    .filter(|package| !debian_package_installed(package))
                    .collect();
                (!missing.is_empty()).then(|| missing.join(" "))
            }
            Verify::Program { name, fallbacks } => systems::find_program(name, fallbacks)
                .is_none()
                .then(|| name.to_string()),
        }
    }
}

impl Step {
    fn new(title: impl Into<String>, commands: Vec<CommandLine>) -> Self {
        Self {
            title: title.into(),
            needed: true,
            commands,
            blocker: None,
            verify: Verify::Nothing,
        }
    }

    /// Runs the commands (if they can run), then checks what they should
    /// have installed.
    fn execute(&self) -> Outcome {
        let started = Instant::now();
        let failed = |reason: String| Outcome::Failed {
            reason,
            elapsed: started.elapsed(),
        };
        if let Some(blocker) = &self.blocker {
            return failed(blocker.clone());
        }
        for command in &self.commands {
            if let Err(reason) = command.run() {
                // The title names a lone command; of several, say which failed.
                if self.commands.len() == 1 {
                    return failed(reason);
                }
                return failed(format!("{command}: {reason}"));
            }
        }
        match self.verify.missing() {
            None => Outcome::Installed {
                elapsed: started.elapsed(),
            },
            Some(missing) => failed(format!("finished, but still missing: {missing}")),
        }
    }
}

impl fmt::Display for Step {
    /// `cargo install vpncloud --locked (already present)`, for dry runs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.title)?;
        match (&self.blocker, self.needed) {
            (_, false) => write!(f, " (already present)"),
            (Some(blocker), true) => write!(f, " (cannot run: {blocker})"),
            (None, true) => Ok(()),
        }
    }
}

/// What became of one step.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Installed { elapsed: Duration },
    AlreadyPresent,
    Failed { reason: String, elapsed: Duration },
}

/// Every step's outcome, in order.
#[derive(Debug, Clone)]
pub struct Summary {
    pub results: Vec<(Step, Outcome)>,
}

impl Summary {
    /// Whether no step failed.
    pub fn succeeded(&self) -> bool {
        !self
            .results
            .iter()
            .any(|(_, outcome)| matches!(outcome, Outcome::Failed { .. }))
    }

    fn titles(&self, wanted: impl Fn(&Outcome) -> bool) -> Vec<&str> {
        self.results
            .iter()
            .filter(|(_, outcome)| wanted(outcome))
            .map(|(step, _)| step.title.as_str())
            .collect()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let installed = self.titles(|o| matches!(o, Outcome::Installed { .. }));
        let present = self.titles(|o| matches!(o, Outcome::AlreadyPresent));
        writeln!(f, "installed: {}", list_or_none(&installed))?;
        writeln!(f, "already present: {}", list_or_none(&present))?;
        let failures: Vec<_> = self
            .results
            .iter()
            .filter_map(|(step, outcome)| match outcome {
                Outcome::Failed { reason, .. } => Some((step, reason)),
                _ => None,
            })
            .collect();
        if failures.is_empty() {
            return writeln!(f, "failed: none");
        }
        writeln!(f, "failed:")?;
        for (step, reason) in failures {
            writeln!(f, "  {}: {}", step.title, reason.replace('\n', "\n    "))?;
        }
        Ok(())
    }
}

fn list_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join("; ")
    }
}

/// How [`run`] shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Plain lines, plus a spinner when stderr is a terminal.
    Auto,
    /// Plain lines only.
    Lines,
    /// Nothing (tests, callers that print the summary themselves).
    Silent,
}

/// What would be done on this machine, in order; steps with nothing to do
/// have `needed == false`.
pub fn plan() -> Vec<Step> {
    let debian = debian_packages();
    let missing_debs: Vec<&str> = debian
        .iter()
        .copied()
        .filter(|package| !debian_package_installed(package))
        .collect();
    let apt_blocker = if systems::find_program("apt-get", &[]).is_none() {
        Some("apt-get not found (not a Debian-based system)".to_string())
    } else if !crate::netns::is_root() {
        Some("needs root".to_string())
    } else {
        None
    };

    // Only the missing packages are installed; the title lists them all
    // when there is nothing to do.
    let listed = if missing_debs.is_empty() {
        debian.join(" ")
    } else {
        missing_debs.join(" ")
    };
    let mut install_args = vec!["install", "-y"];
    install_args.extend(&missing_debs);
    let mut install_command = CommandLine::new("apt-get", &install_args);
    install_command
        .env
        .push(("DEBIAN_FRONTEND", "noninteractive".to_string()));
    let mut apt = Step::new(
        format!("apt-get update && apt-get install -y {listed}"),
        vec![CommandLine::new("apt-get", &["update"]), install_command],
    );
    apt.needed = !missing_debs.is_empty();
    apt.blocker = apt_blocker;
    apt.verify = Verify::DebianPackages(missing_debs.iter().map(|p| p.to_string()).collect());

    let mut steps = vec![apt];
    steps.extend(install_list().filter_map(|item| match item {
        Ok(Item::Go { module, program }) => Some(go_step(module, program)),
        Ok(Item::Cargo(crate_name)) => Some(cargo_step(crate_name)),
        Ok(Item::Debian(_)) | Err(_) => None,
    }));
    steps
}

/// `go install MODULE`, needed unless `program` is on PATH or among the
/// binaries of `$GOPATH/bin` or `~/go/bin`, where `go install` names it
/// after the module (`golang.zx2c4.com/wireguard` → `wireguard`).
fn go_step(module: &str, program: &'static str) -> Step {
    let go = systems::find_program("go", &[PathBuf::from("/usr/local/go/bin/go")]);
    let go_program = go
        .as_ref()
        .map_or_else(|| "go".to_string(), |path| path.display().to_string());
    let mut step = Step::new(
        format!("go install {module}"),
        vec![CommandLine::new(&go_program, &["install", module])],
    );
    let path = module.split('@').next().unwrap_or(module);
    let module_binary = path.rsplit('/').next().unwrap_or(path);
    let mut fallbacks = Vec::new();
    for bin_dir in [
        std::env::var_os("GOPATH").map(|gopath| PathBuf::from(gopath).join("bin")),
        systems::home_path("go/bin"),
    ]
    .into_iter()
    .flatten()
    {
        fallbacks.push(bin_dir.join(module_binary));
        fallbacks.push(bin_dir.join(program));
    }
    step.needed = systems::find_program(program, &fallbacks).is_none();
    if go.is_none() {
        step.blocker = Some("go not found; install Go from https://go.dev/dl".to_string());
    }
    step.verify = Verify::Program {
        name: program,
        fallbacks,
    };
    step
}

/// `cargo install CRATE --locked`, needed unless the program of the
/// crate's name is on PATH or in `~/.cargo/bin`.
fn cargo_step(crate_name: &'static str) -> Step {
    let binary = crate_name;
    let cargo = systems::find_program(
        "cargo",
        &systems::home_path(".cargo/bin/cargo")
            .into_iter()
            .collect::<Vec<_>>(),
    );
    let program = cargo
        .as_ref()
        .map_or_else(|| "cargo".to_string(), |path| path.display().to_string());
    let mut step = Step::new(
        format!("cargo install {crate_name} --locked"),
        vec![CommandLine::new(
            &program,
            &["install", crate_name, "--locked"],
        )],
    );
    let fallbacks: Vec<PathBuf> = systems::home_path(&format!(".cargo/bin/{binary}"))
        .into_iter()
        .collect();
    step.needed = systems::find_program(binary, &fallbacks).is_none();
    if cargo.is_none() {
        step.blocker = Some("cargo not found; install Rust from https://rustup.rs".to_string());
    }
    step.verify = Verify::Program {
        name: binary,
        fallbacks,
    };
    step
}

/// Carries out the needed `steps` in order, showing `progress` on stderr.
pub fn run(steps: Vec<Step>, progress: Progress) -> Summary {
    let total = steps.len();
    let spinner_allowed = progress == Progress::Auto && std::io::stderr().is_terminal();
    let mut results = Vec::with_capacity(total);
    for (index, step) in steps.into_iter().enumerate() {
        let prefix = format!("[{}/{total}] {}", index + 1, step.title);
        let outcome = if step.needed {
            let spinner = spinner_allowed.then(|| spinner(&prefix));
            if spinner.is_none() && progress != Progress::Silent {
                // The rest of the line follows when the step ends.
                eprint!("{prefix} ... ");
                let _ = std::io::stderr().flush();
            }
            let outcome = step.execute();
            if let Some(spinner) = spinner {
                spinner.finish_and_clear();
                eprint!("{prefix} ... ");
            }
            outcome
        } else {
            if progress != Progress::Silent {
                eprint!("{prefix} ... ");
            }
            Outcome::AlreadyPresent
        };
        if progress != Progress::Silent {
            eprintln!("{}", describe(&outcome));
        }
        results.push((step, outcome));
    }
    Summary { results }
}

fn spinner(prefix: &str) -> indicatif::ProgressBar {
    let spinner = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} {spinner} {elapsed}") {
        spinner.set_style(style);
    }
    spinner.set_message(format!("{prefix} ..."));
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}

/// The end of a progress line: `done in 94 s`.
fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Installed { elapsed } => format!("done in {} s", elapsed.as_secs()),
        Outcome::AlreadyPresent => "already present".to_string(),
        Outcome::Failed { reason, elapsed } => {
            let first = reason.lines().next().unwrap_or("");
            format!("failed after {} s: {first}", elapsed.as_secs())
        }
    }
}

/// Whether `dpkg -s PACKAGE` says it is installed.
fn debian_package_installed(package: &str) -> bool {
    Command::new("dpkg")
        .args(["-s", package])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|output| {
            output.status.success()
                && String::from_utf8_lossy(&output.stdout).contains("Status: install ok installed")
        })
}

/// The last `count` non-empty lines of `text`, joined by newlines.
fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Step {
        Step::new(script, vec![CommandLine::new("sh", &["-c", script])])
    }

    #[test]
    fn a_failing_step_does_not_stop_the_others() {
        let mut present = shell("exit 3");
        present.needed = false;
        let mut blocked = shell("true");
        blocked.blocker = Some("go not found".to_string());
        let mut unverified = shell("true");
        unverified.verify = Verify::Program {
            name: "fjord-lab-no-such-program",
            fallbacks: Vec::new(),
        };
        let steps = vec![
            shell("echo one; echo two >&2; exit 7"),
            shell("true"),
            present,
            blocked,
            unverified,
            Step::new(
                "missing tool",
                vec![CommandLine::new("/nonexistent/fjord-lab-tool", &[])],
            ),
            Step::new(
                "two commands",
                vec![
                    CommandLine::new("sh", &["-c", "exit 4"]),
                    CommandLine::new("/nonexistent/fjord-lab-tool", &[]),
                ],
            ),
        ];
        let summary = run(steps, Progress::Silent);
        let outcomes: Vec<&Outcome> = summary.results.iter().map(|(_, o)| o).collect();
        match outcomes[0] {
            Outcome::Failed { reason, .. } => {
                assert!(
                    reason.contains("exit status: 7") && reason.ends_with("one\ntwo"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(outcomes[1], Outcome::Installed { .. }));
        assert_eq!(outcomes[2], &Outcome::AlreadyPresent);
        assert!(matches!(outcomes[3], Outcome::Failed { reason, .. } if reason == "go not found"));
        assert!(
            matches!(outcomes[4], Outcome::Failed { reason, .. } if reason.contains("still missing: fjord-lab-no-such-program"))
        );
        assert!(
            matches!(outcomes[5], Outcome::Failed { reason, .. } if reason.contains("could not start"))
        );
        assert!(!summary.succeeded());
        let text = summary.to_string();
        assert!(text.contains("installed: true\n"), "{text}");
        assert!(text.contains("already present: exit 3\n"), "{text}");
        assert!(text.contains("  true: go not found"), "{text}");
    }

    #[test]
    fn plan_lists_every_step_in_order() {
        let steps = plan();
        let titles: Vec<&str> = steps.iter().map(|s| s.title.as_str()).collect();
        assert_eq!(titles.len(), 4, "{titles:?}");
        assert!(titles[0].starts_with("apt-get update && apt-get install -y "));
        assert_eq!(titles[1], "go install golang.zx2c4.com/wireguard@latest");
        assert_eq!(titles[2], "cargo install boringtun-cli --locked");
        assert_eq!(titles[3], "cargo install vpncloud --locked");
        // Nothing to install means no update either.
        assert_eq!(steps[0].needed, steps[0].commands[1].args.len() > 2);
    }

    #[test]
    fn every_line_of_the_install_list_is_an_item() {
        let bad: Vec<&str> = install_list().filter_map(Result::err).collect();
        assert!(bad.is_empty(), "not items: {bad:?}");
        assert!(debian_packages().contains(&"wireguard-tools"));
        assert!(install_list().any(|item| item
            == Ok(Item::Go {
                module: "golang.zx2c4.com/wireguard@latest",
                program: "wireguard-go",
            })));
    }

    #[test]
    fn progress_line_ends() {
        let done = Outcome::Installed {
            elapsed: Duration::from_secs(94),
        };
        assert_eq!(describe(&done), "done in 94 s");
        let failed = Outcome::Failed {
            reason: "exit status: 101\nerror: could not compile".to_string(),
            elapsed: Duration::from_secs(3),
        };
        assert_eq!(describe(&failed), "failed after 3 s: exit status: 101");
    }
}
