//! [`Host`] over a live `spank_t`: the only place that calls into Slurm (besides the
//! log sink).

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

use crate::ffi;
use crate::host::{Context, Host, HostError, OptionSpec};

pub struct SpankHost {
    sp: ffi::spank_t,
}

impl SpankHost {
    /// # Safety
    /// `sp` must be the handle Slurm passed to the running hook, used only during it.
    pub unsafe fn new(sp: ffi::spank_t) -> Self {
        SpankHost { sp }
    }

    fn check(&self, call: &'static str, rc: ffi::spank_err_t) -> Result<(), HostError> {
        if rc == ffi::ESPANK_SUCCESS {
            return Ok(());
        }
        // SAFETY: spank_strerror returns a static string for every code.
        let reason = unsafe { CStr::from_ptr(ffi::spank_strerror(rc)) }
            .to_string_lossy()
            .into_owned();
        Err(HostError { call, reason })
    }

    fn item_u32(&self, call: &'static str, item: ffi::spank_item_t) -> Result<u32, HostError> {
        let mut value: u32 = 0;
        // SAFETY: these items take one `uint32_t *`, which lives across the call.
        let rc = unsafe { ffi::spank_get_item(self.sp, item, &mut value as *mut u32) };
        self.check(call, rc).map(|_| value)
    }
}

fn c_string(call: &'static str, text: &str) -> Result<CString, HostError> {
    CString::new(text).map_err(|_| HostError {
        call,
        reason: format!("'{text}' contains a NUL byte"),
    })
}

impl Host for SpankHost {
    fn context(&self) -> Context {
        // SAFETY: no arguments; valid in every hook.
        match unsafe { ffi::spank_context() } {
            ffi::S_CTX_LOCAL => Context::Local,
            ffi::S_CTX_REMOTE => Context::Remote,
            ffi::S_CTX_ALLOCATOR => Context::Allocator,
            ffi::S_CTX_SLURMD => Context::Slurmd,
            ffi::S_CTX_JOB_SCRIPT => Context::JobScript,
            _ => Context::Unknown,
        }
    }

    fn job_id(&self) -> Result<u32, HostError> {
        self.item_u32("spank_get_item(S_JOB_ID)", ffi::S_JOB_ID)
    }

    fn step_id(&self) -> Result<u32, HostError> {
        self.item_u32("spank_get_item(S_JOB_STEPID)", ffi::S_JOB_STEPID)
    }

    fn node_id(&self) -> Result<u32, HostError> {
        self.item_u32("spank_get_item(S_JOB_NODEID)", ffi::S_JOB_NODEID)
    }

    fn step_node_count(&self) -> Result<u32, HostError> {
        self.item_u32("spank_get_item(S_JOB_NNODES)", ffi::S_JOB_NNODES)
    }

    fn job_uid(&self) -> Result<u32, HostError> {
        let mut uid: libc::uid_t = 0;
        // SAFETY: S_JOB_UID takes one `uid_t *`.
        let rc =
            unsafe { ffi::spank_get_item(self.sp, ffi::S_JOB_UID, &mut uid as *mut libc::uid_t) };
        self.check("spank_get_item(S_JOB_UID)", rc).map(|_| uid)
    }

    fn local_task_id(&self) -> Result<u32, HostError> {
        let mut id: c_int = -1;
        // SAFETY: S_TASK_ID takes one `int *`.
        let rc = unsafe { ffi::spank_get_item(self.sp, ffi::S_TASK_ID, &mut id as *mut c_int) };
        self.check("spank_get_item(S_TASK_ID)", rc)?;
        u32::try_from(id).map_err(|_| HostError {
            call: "spank_get_item(S_TASK_ID)",
            reason: format!("negative task id {id}"),
        })
    }

    fn global_task_id(&self) -> Result<u32, HostError> {
        self.item_u32("spank_get_item(S_TASK_GLOBAL_ID)", ffi::S_TASK_GLOBAL_ID)
    }

    fn local_task_count(&self) -> Result<u32, HostError> {
        self.item_u32(
            "spank_get_item(S_JOB_LOCAL_TASK_COUNT)",
            ffi::S_JOB_LOCAL_TASK_COUNT,
        )
    }

    fn step_alloc_cores(&self) -> Result<String, HostError> {
        let call = "spank_get_item(S_STEP_ALLOC_CORES)";
        let mut text: *mut c_char = std::ptr::null_mut();
        // SAFETY: S_STEP_ALLOC_CORES takes one `char **`; Slurm keeps ownership.
        let rc = unsafe {
            ffi::spank_get_item(
                self.sp,
                ffi::S_STEP_ALLOC_CORES,
                &mut text as *mut *mut c_char,
            )
        };
        self.check(call, rc)?;
        if text.is_null() {
            return Err(HostError {
                call,
                reason: "no core list".into(),
            });
        }
        // SAFETY: non-NULL and NUL-terminated, owned by slurmstepd for the step.
        Ok(unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned())
    }

    fn getenv(&self, name: &str) -> Result<Option<String>, HostError> {
        let call = "spank_getenv";
        let var = c_string(call, name)?;
        let mut len = 4096usize;
        loop {
            let mut buf = vec![0u8; len];
            // SAFETY: `buf` holds `len` writable bytes; Slurm NUL-terminates within them.
            let rc = unsafe {
                ffi::spank_getenv(self.sp, var.as_ptr(), buf.as_mut_ptr().cast(), len as c_int)
            };
            match rc {
                ffi::ESPANK_SUCCESS => {
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    return Ok(Some(String::from_utf8_lossy(&buf[..end]).into_owned()));
                }
                ffi::ESPANK_ENV_NOEXIST => return Ok(None),
                ffi::ESPANK_NOSPACE if len < (1 << 20) => len *= 16,
                _ => return self.check(call, rc).map(|_| None),
            }
        }
    }

    fn setenv(&self, name: &str, value: &str) -> Result<(), HostError> {
        let var = c_string("spank_setenv", name)?;
        let val = c_string("spank_setenv", value)?;
        // SAFETY: both strings are valid for the call; Slurm copies them. overwrite = 1.
        let rc = unsafe { ffi::spank_setenv(self.sp, var.as_ptr(), val.as_ptr(), 1) };
        self.check("spank_setenv", rc)
    }

    fn register_option(&self, option: &OptionSpec) -> Result<(), HostError> {
        let call = "spank_option_register";
        let name = c_string(call, option.name)?;
        let arginfo = c_string(call, option.arginfo)?;
        let usage = c_string(call, option.usage)?;
        let mut opt = ffi::spank_option {
            name: name.as_ptr().cast_mut(),
            arginfo: arginfo.as_ptr().cast_mut(),
            usage: usage.as_ptr().cast_mut(),
            has_arg: 1,
            val: 0,
            cb: Some(crate::option_callback),
        };
        // SAFETY: Slurm copies the option and its strings during the call, so the
        // CStrings may drop afterwards; the callback is a plain guarded extern fn.
        let rc = unsafe { ffi::spank_option_register(self.sp, &mut opt) };
        self.check(call, rc)
    }

    fn process_env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}
