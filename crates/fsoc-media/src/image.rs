//! Persistent image-file backend (`ImageStore`); layout in docs/FORMAT.md, "Image file".
