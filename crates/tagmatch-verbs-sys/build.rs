//! Build script of `tagmatch-verbs-sys`.
//!
//! Without the `verbs` feature it does nothing at all (no probing, no system library). With
//! it, it runs bindgen over `wrapper.h` (`<infiniband/verbs.h>` + `<infiniband/tm_types.h>`),
//! lets bindgen write C wrappers for every allowlisted `static inline` function
//! (`wrap_static_fns`), compiles those with `cc` and links `libibverbs`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "verbs")]
    verbs::generate();
}

#[cfg(feature = "verbs")]
mod verbs {
    use std::path::{Path, PathBuf};

    const HEADERS_PACKAGE: &str = "libibverbs-dev";
    const LIBCLANG_PACKAGE: &str = "libclang-dev";

    pub fn generate() {
        let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
        let out_dir = PathBuf::from(env("OUT_DIR"));
        let wrapper = manifest_dir.join("wrapper.h");
        println!("cargo:rerun-if-changed={}", wrapper.display());
        println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
        println!("cargo:rerun-if-env-changed=BINDGEN_EXTRA_CLANG_ARGS");

        let wrappers_c = out_dir.join("static_wrappers");
        let builder = bindgen::Builder::default()
            .header(wrapper.to_string_lossy())
            // Functions, types and constants of the verbs API. `___ibv_query_port` is what the
            // `ibv_query_port` macro expands to (the exported `ibv_query_port` symbol takes the
            // legacy `_compat_ibv_port_attr` and is blocked below).
            .allowlist_function("(ibv|verbs)_.*|___ibv_query_port")
            .allowlist_type("(ibv|verbs)_.*")
            .allowlist_var("(IBV|ibv|VERBS|verbs)_.*")
            .blocklist_function("ibv_query_port")
            // C enum constants share one namespace, so the bare C names cannot collide:
            // `IBV_WC_TM_ERR`, not `ibv_wc_status_IBV_WC_TM_ERR`.
            .prepend_enum_name(false)
            .derive_default(true)
            .derive_debug(true)
            .layout_tests(true)
            .wrap_static_fns(true)
            .wrap_static_fns_path(&wrappers_c)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));

        // bindgen panics when it cannot load libclang at all: catch that (with the default
        // hook's backtrace silenced) to print which Debian package is missing instead.
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let generated =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
        std::panic::set_hook(default_hook);
        let bindings = match generated {
            Ok(Ok(bindings)) => bindings,
            Ok(Err(err)) => fail_generate(&err.to_string()),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                fail_generate(&msg)
            }
        };
        bindings
            .write_to_file(out_dir.join("bindings.rs"))
            .expect("tagmatch-verbs-sys: cannot write bindings.rs");

        // bindgen appends `.c` to the wrap_static_fns path.
        let c_file = wrappers_c.with_extension("c");
        compile_wrappers(&c_file, &manifest_dir);
        println!("cargo:rustc-link-lib=ibverbs");
    }

    fn compile_wrappers(c_file: &Path, manifest_dir: &Path) {
        // The generated file includes wrapper.h by its absolute path; `-I` the crate dir too
        // so a relocated OUT_DIR still finds it.
        cc::Build::new()
            .file(c_file)
            .include(manifest_dir)
            .warnings(false)
            .compile("tagmatch_verbs_static_wrappers");
    }

    fn fail_generate(msg: &str) -> ! {
        let lower = msg.to_ascii_lowercase();
        let hint = if lower.contains("libclang") || lower.contains("clang_") {
            format!(
                "bindgen could not load libclang: install Debian's `{LIBCLANG_PACKAGE}` \
                 (`apt-get install {LIBCLANG_PACKAGE}`, or `cargo xtask apt {LIBCLANG_PACKAGE}`), \
                 or point LIBCLANG_PATH at a libclang.so"
            )
        } else if lower.contains("file not found") || lower.contains("infiniband") {
            format!(
                "the verbs headers <infiniband/verbs.h> / <infiniband/tm_types.h> were not \
                 found: install Debian's `{HEADERS_PACKAGE}` (`apt-get install {HEADERS_PACKAGE}`, \
                 or `cargo xtask apt {HEADERS_PACKAGE}`)"
            )
        } else {
            format!(
                "bindgen failed; the `verbs` feature needs Debian's `{HEADERS_PACKAGE}` and \
                 `{LIBCLANG_PACKAGE}`"
            )
        };
        panic!(
            "\n\ntagmatch-verbs-sys (feature `verbs`): {hint}.\n\
             (Build without `--features verbs` to skip the verbs bindings.)\n\
             bindgen said: {msg}\n"
        );
    }

    fn env(key: &str) -> String {
        std::env::var(key).unwrap_or_else(|_| panic!("tagmatch-verbs-sys: {key} is not set"))
    }
}
