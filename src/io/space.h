/* Room on the file system for a file about to be written, and write
 * errors that name the file, the errno text and the bytes needed.
 *
 * A full disk in the middle of a collective parallel-HDF5 write leaves the
 * ranks in different places of H5Fclose (one in MPI_File_close, another in
 * the metadata cache's barrier) and the job hangs. So every writer first
 * makes sure the whole file fits: mt_space_reserve checks the file
 * system's free space and then allocates the blocks (fallocate, keeping the
 * file's size), so no later write of up to that many bytes can fail for
 * space; the writers call it before any collective write, and agree on the
 * result. On a file system without fallocate the free-space check alone
 * stands. mt_space_release gives back the blocks reserved past the end. */
#ifndef MT_SPACE_H
#define MT_SPACE_H

#include "core/core.h"

#include <stdint.h>

/* Reserves bytes for the file at path (it may be empty); when it does not
 * exist yet, checks its folder's free space only. MT_ERR_WRITE naming
 * path, the bytes needed and free, and the errno text when they do not
 * fit. */
int mt_space_reserve(const char *path, uint64_t bytes);
/* Frees the blocks reserved beyond the file's end (after it is closed).
 * Best effort: a failure changes nothing but the space used. */
void mt_space_release(const char *path);
/* MT_ERR_WRITE (disk full, quota, I/O error, read-only) or MT_ERR_FILE for
 * errno e, with "what path: strerror(e)". */
int mt_write_failed(const char *file, int line, const char *func, const char *what,
                    const char *path, int e);
#define MT_WRITE_FAILED(what, path, e) mt_write_failed(__FILE__, __LINE__, __func__, what, path, e)

#endif
