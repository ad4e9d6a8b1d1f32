/* mkdata flip, unattr and unlink: changes an HDF5 file in place, to make
 * a damaged checkpoint or an older file (a bit flipped in a dataset's data,
 * a root attribute or a root dataset removed). */
#include "mkdata.h"

#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

/* flip: damages one byte of a dataset's data where it lies in the file
 * (a checkpoint's tensor: the checksum must catch it). */
int cmd_flip(int argc, char **argv) {
  long byte = 0;
  if ((argc != 2 && argc != 3) || (argc == 3 && mk_parse_long(argv[2], 0, LONG_MAX, "BYTE", &byte))) {
    mk_fail("usage: mkdata flip FILE.h5 DATASET [BYTE]");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = f < 0 ? -1 : H5Dopen2(f, argv[1], H5P_DEFAULT);
  haddr_t off = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
  hsize_t size = d < 0 ? 0 : H5Dget_storage_size(d);
  if (d >= 0) H5Dclose(d);
  if (f >= 0) H5Fclose(f);
  if (off == HADDR_UNDEF || (hsize_t)byte >= size) {
    mk_fail("%s: %s is not a contiguous dataset with a byte %ld", argv[0], argv[1], byte);
    return 1;
  }
  int fd = open(argv[0], O_RDWR);
  unsigned char c;
  const off_t at = (off_t)off + (off_t)byte;
  int ok = fd >= 0 && pread(fd, &c, 1, at) == 1;
  c ^= 1;
  ok = ok && pwrite(fd, &c, 1, at) == 1;
  if (fd >= 0 && close(fd) != 0) ok = 0;
  if (!ok) {
    mk_fail("%s: cannot rewrite byte %lld", argv[0], (long long)at);
    return 1;
  }
  printf("%s: flipped a bit of byte %ld of %s (file offset %lld)\n", argv[0], byte, argv[1],
         (long long)at);
  return 0;
}

/* unattr: removes a root attribute (a checkpoint as an older mpitrain wrote
 * it: no run_id). */
int cmd_unattr(int argc, char **argv) {
  if (argc != 2) {
    mk_fail("usage: mkdata unattr FILE.h5 NAME");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDWR, H5P_DEFAULT);
  int ok = f >= 0 && H5Adelete(f, argv[1]) >= 0;
  if (f >= 0 && H5Fclose(f) < 0) ok = 0;
  if (!ok) {
    mk_fail("%s: cannot remove the attribute %s", argv[0], argv[1]);
    return 1;
  }
  return 0;
}

/* unlink: removes a root dataset (the file keeps its size: HDF5 does not
 * reclaim it, which does not matter to a reader). */
int cmd_unlink(int argc, char **argv) {
  if (argc != 2) {
    mk_fail("usage: mkdata unlink FILE.h5 NAME");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDWR, H5P_DEFAULT);
  int ok = f >= 0 && H5Ldelete(f, argv[1], H5P_DEFAULT) >= 0;
  if (f >= 0 && H5Fclose(f) < 0) ok = 0;
  if (!ok) {
    mk_fail("%s: cannot remove the dataset %s", argv[0], argv[1]);
    return 1;
  }
  return 0;
}
