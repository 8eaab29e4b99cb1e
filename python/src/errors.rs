//! File-system and image errors as Python exceptions: `OSError(errno, message, filename)`,
//! which Python turns into the matching subclass (FileNotFoundError for ENOENT,
//! FileExistsError, IsADirectoryError, NotADirectoryError, …; ENOSPC stays an OSError with
//! `errno == errno.ENOSPC`). The errno is the file system's own (`FsError::errno`, the one
//! mapping in fsoc), never guessed here.

use std::path::Path;

use fsoc_core::fs::FsError;
use pyo3::exceptions::PyOSError;
use pyo3::PyErr;

use crate::image_file::OpenError;

/// `error` on the image path `path` (empty when the call names no path).
pub fn fs_error(error: &FsError, path: &[u8]) -> PyErr {
    let message = error.to_string();
    if path.is_empty() {
        PyOSError::new_err((error.errno(), message))
    } else {
        PyOSError::new_err((error.errno(), message, crate::os_path(path)))
    }
}

/// Why the image file at `path` could not be created or opened (the message names the path).
pub fn open_error(error: OpenError, path: &Path) -> PyErr {
    // Python appends the file name to the message: say it once.
    let prefix = format!("{}: ", path.display());
    let message = error.message.strip_prefix(&prefix).map_or(error.message.clone(), str::to_string);
    PyOSError::new_err((error.errno, message, path.as_os_str().to_os_string()))
}
