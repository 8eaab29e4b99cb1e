//! `Errno`: the error number an Rlerror carries, with the Linux values by name. 9P2000.L sends
//! Linux numbers whatever the server's host is, so these are fixed, not taken from libc.

/// A Linux error number, as Rlerror's ecode[4] carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Errno(pub u32);

impl Errno {
    pub const EPERM: Errno = Errno(1);
    pub const ENOENT: Errno = Errno(2);
    pub const EINTR: Errno = Errno(4);
    pub const EIO: Errno = Errno(5);
    pub const ENXIO: Errno = Errno(6);
    pub const E2BIG: Errno = Errno(7);
    pub const EBADF: Errno = Errno(9);
    pub const EAGAIN: Errno = Errno(11);
    pub const ENOMEM: Errno = Errno(12);
    pub const EACCES: Errno = Errno(13);
    pub const EFAULT: Errno = Errno(14);
    pub const EBUSY: Errno = Errno(16);
    pub const EEXIST: Errno = Errno(17);
    pub const EXDEV: Errno = Errno(18);
    pub const ENODEV: Errno = Errno(19);
    pub const ENOTDIR: Errno = Errno(20);
    pub const EISDIR: Errno = Errno(21);
    pub const EINVAL: Errno = Errno(22);
    pub const ENFILE: Errno = Errno(23);
    pub const EMFILE: Errno = Errno(24);
    pub const ETXTBSY: Errno = Errno(26);
    pub const EFBIG: Errno = Errno(27);
    pub const ENOSPC: Errno = Errno(28);
    pub const ESPIPE: Errno = Errno(29);
    pub const EROFS: Errno = Errno(30);
    pub const EMLINK: Errno = Errno(31);
    pub const ERANGE: Errno = Errno(34);
    pub const ENAMETOOLONG: Errno = Errno(36);
    pub const ENOLCK: Errno = Errno(37);
    pub const ENOSYS: Errno = Errno(38);
    pub const ENOTEMPTY: Errno = Errno(39);
    pub const ELOOP: Errno = Errno(40);
    /// Also ENOATTR: getxattr of an attribute that does not exist.
    pub const ENODATA: Errno = Errno(61);
    pub const EPROTO: Errno = Errno(71);
    pub const EBADMSG: Errno = Errno(74);
    pub const EOVERFLOW: Errno = Errno(75);
    pub const EMSGSIZE: Errno = Errno(90);
    /// Also ENOTSUP. The answer for an operation the file system does not support.
    pub const EOPNOTSUPP: Errno = Errno(95);
    pub const ECONNRESET: Errno = Errno(104);
    pub const ETIMEDOUT: Errno = Errno(110);
    pub const ESTALE: Errno = Errno(116);
    pub const EDQUOT: Errno = Errno(122);
    pub const ECANCELED: Errno = Errno(125);
    /// The kernel-internal ENOTSUPP that diod's protocol.md mentions for Trenameat and
    /// Tunlinkat fallbacks. Not a user-space errno: a server should send EOPNOTSUPP.
    pub const ENOTSUPP: Errno = Errno(524);
}
