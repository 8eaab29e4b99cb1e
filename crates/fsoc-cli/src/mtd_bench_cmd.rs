//! `fsoc bench mtd`: fsoc against UBI + UBIFS on the kernel's nandsim (fsoc-bench's `mtd`):
//! its options, each step's line on stderr, the JSON, the chart beside it and the Markdown
//! tables; `--render` makes the chart and tables again from a JSON, e.g. on the host after a
//! run in a guest (scripts/bench-mtd.sh).

use std::fs;
use std::path::{Path, PathBuf};

use fsoc_bench::fuse::mounts;
use fsoc_bench::mtd::{self, report, MtdOptions};

/// `fsoc bench mtd`'s options.
#[derive(clap::Args)]
pub struct MtdBenchArgs {
    /// Where to write the results as JSON (the chart goes beside it, as .svg). Measuring needs
    /// a Linux kernel with nandsim, UBI, UBIFS and kprobe events, as root: on a build machine
    /// run scripts/bench-mtd.sh --json OUT, which boots one under QEMU and runs this there.
    #[arg(long, required_unless_present = "render")]
    json: Option<PathBuf>,
    /// Chip sizes 256M and 1G, 100 files in the mount tree, 200 small files, 8 MiB
    /// sequential and PostMark's quick scale (100 files, 1,000 transactions): a smoke run.
    #[arg(long)]
    quick: bool,
    /// Comma-separated chip sizes for the mount comparison, each a power of two from 64M to
    /// 16G (default 256M,1G,2G,4G,8G; 256M,1G with --quick).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Mounts per file system and size, 1 to 20 (default 3; 1 with --quick): the counts must
    /// agree, the time is their median.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    mount_reps: Option<u32>,
    /// Skip the workloads (small files, sequential, PostMark): mount comparison only.
    #[arg(long)]
    mount_only: bool,
    /// Program that loads a kernel module with parameters: modprobe, or the guest's
    /// load-module (scripts/vm/build-initramfs.sh).
    #[arg(long, default_value = "modprobe")]
    module_loader: String,
    /// Directory for mount points and program output (default: the temporary directory).
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Text recorded in the JSON as the code measured (scripts/bench-mtd.sh passes the git
    /// commit).
    #[arg(long)]
    code: Option<String>,
    /// Text recorded in the JSON about the machine outside the guest (scripts/bench-mtd.sh
    /// passes its CPUs and load average): wall times depend on it.
    #[arg(long)]
    host: Option<String>,
    /// Measure nothing: read a JSON an earlier run wrote, write its chart beside it (.svg) and
    /// print its tables.
    #[arg(long, value_name = "JSON", conflicts_with_all = ["json", "quick", "sizes", "mount_reps", "mount_only", "code", "host"])]
    render: Option<PathBuf>,
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |error| format!("{}: {error}", path.display())
}

/// The library's options from the command line's: sizes parsed, the fsoc executable found.
fn options(args: &MtdBenchArgs) -> Result<MtdOptions, String> {
    let sizes = args
        .sizes
        .iter()
        .map(|name| crate::volume_cmd::parse_size(name).map(|bytes| (name.clone(), bytes)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(MtdOptions {
        fsoc: std::env::current_exe().map_err(|error| format!("cannot find the fsoc executable: {error}"))?,
        quick: args.quick,
        sizes,
        mount_reps: args.mount_reps,
        mount_only: args.mount_only,
        module_loader: args.module_loader.clone(),
        scratch: args.scratch.clone(),
        code: args.code.clone(),
        host: args.host.clone(),
    })
}

pub fn run(args: MtdBenchArgs) -> Result<(), String> {
    if let Some(path) = &args.render {
        return render(path);
    }
    let json = args.json.clone().ok_or("give --json OUT (or --render JSON)")?;
    if json.extension().is_some_and(|extension| extension == "svg") {
        return Err(format!("{}: give the JSON file's name; the chart goes beside it as .svg", json.display()));
    }
    let options = options(&args)?;
    if let Some(parent) = json.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    crate::interrupts::catch_interrupts();
    mounts::stop_when(crate::interrupts::flag());
    let report = mtd::run(&options, &mut |line| eprintln!("bench mtd: {line}"))?;
    fs::write(&json, report.to_json()).map_err(io_error(&json))?;
    let chart = json.with_extension("svg");
    fs::write(&chart, report::render_chart(&report)).map_err(io_error(&chart))?;
    println!("{}", report::markdown_tables(&report));
    println!("bench mtd: results in {} and {} ({:.0} s)", json.display(), chart.display(), report.wall_seconds);
    let failures = mtd::failures(&report);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} measurement(s) failed (errors in {}): {}", failures.len(), json.display(), failures.join("; ")))
    }
}

/// `--render JSON`: the chart beside it and the tables, from a finished run.
fn render(path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(io_error(path))?;
    let report = report::Report::from_json(&text)
        .map_err(|error| format!("{}: not a bench mtd result: {error}", path.display()))?;
    let chart = path.with_extension("svg");
    fs::write(&chart, report::render_chart(&report)).map_err(io_error(&chart))?;
    println!("{}", report::markdown_tables(&report));
    println!("bench mtd: chart in {}", chart.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(extra: &[&str]) -> MtdBenchArgs {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: MtdBenchArgs,
        }
        let matches = <Wrapper as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("bench-mtd").chain(extra.iter().copied()))
            .expect("arguments parse");
        Wrapper::from_arg_matches(&matches).expect("arguments match").args
    }

    // A size that is not one is refused with the reason (the library refuses the sizes nandsim
    // cannot make).
    #[test]
    fn sizes_are_parsed() {
        let error = options(&arguments(&["--json", "x.json", "--sizes", "lots"])).err().expect("refused");
        assert!(error.contains("invalid size"), "{error}");
        let parsed = options(&arguments(&["--json", "x.json", "--sizes", "256M,1G"])).expect("options");
        assert_eq!(parsed.sizes, [("256M".to_string(), 256 << 20), ("1G".to_string(), 1 << 30)]);
    }

    // Without --json or --render the command says what to give; a .svg name is refused.
    #[test]
    fn output_names_are_checked() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: MtdBenchArgs,
        }
        assert!(Wrapper::try_parse_from(["bench-mtd"]).is_err(), "--json or --render is required");
        let error = run(arguments(&["--json", "out.svg"])).expect_err("refused");
        assert!(error.contains("give the JSON file's name"), "{error}");
    }

    // A missing JSON for --render is an error naming the file, not a panic.
    #[test]
    fn render_of_a_missing_file_is_an_error() {
        let error = run(arguments(&["--render", "/nonexistent/mtd.json"])).expect_err("error");
        assert!(error.contains("/nonexistent/mtd.json"), "{error}");
    }
}
