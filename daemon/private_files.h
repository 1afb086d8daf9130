#pragma once
// The files gossipd keeps (its checkpoint) in directories that another local user may
// be able to write: the directory is checked before the first use, and every file is
// created without following a link someone planted and read only when this user (or
// root) owns it. docs/security.md, finding 13.

#include <string>
#include <string_view>

#include "base/status.h"

namespace gossip::daemon {

// Refuses (Status::invalid, naming `what`, the directory, its mode or owner and the
// fix) a directory that does not exist, is not a directory, belongs to another user
// than this process's or root, or that group or others may write (sticky or not: in
// /tmp another user can plant a file at a name gossipd is about to read).
Status check_private_dir(const std::string& dir, std::string_view what);

// Writes `bytes` to `path` atomically: a temporary file with a random name in the same
// directory, created with O_EXCL | O_NOFOLLOW through the directory's descriptor (a
// link or file planted at any name is never opened), synced, renamed over `path` and
// the directory synced. A crash leaves the old file or the new one.
Status write_file_atomically(const std::string& path, std::string_view bytes, int mode = 0600);

// The whole of a regular file this user or root owns, opened without following a link
// at its last component. Status::not_found where there is none; Status::invalid where
// it is a link, not a regular file, or another user's (whoever planted it could choose
// what gossipd resumes from).
Result<std::string> read_private_file(const std::string& path, std::string_view what);

}  // namespace gossip::daemon
