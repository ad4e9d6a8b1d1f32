/* h5attr: replaces one attribute of an HDF5 file, so that the test scripts
 * can make a checkpoint or model file that is broken in one known way (no
 * h5py or HDF5 command-line tools needed).
 *
 *   h5attr FILE.h5 OBJECT NAME string|int|double VALUE
 *
 * OBJECT is a group or dataset path ("/" for the file's root). The
 * attribute NAME, if present, is deleted and written again as a scalar of
 * the given type. Exit status: 0 success, 1 failure (one line on stderr),
 * 2 usage error. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 6 || (strcmp(argv[4], "string") && strcmp(argv[4], "int") &&
                    strcmp(argv[4], "double"))) {
    fprintf(stderr, "usage: h5attr FILE.h5 OBJECT NAME string|int|double VALUE\n");
    return 2;
  }
  const char *path = argv[1], *obj = argv[2], *name = argv[3], *type = argv[4], *val = argv[5];
  char *end;
  const long iv = strtol(val, &end, 10);
  if (!strcmp(type, "int") && (!*val || *end)) {
    fprintf(stderr, "h5attr: '%s' is not an integer\n", val);
    return 2;
  }
  const double dv = strtod(val, &end);
  if (!strcmp(type, "double") && (!*val || *end)) {
    fprintf(stderr, "h5attr: '%s' is not a number\n", val);
    return 2;
  }
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t o = f < 0 ? H5I_INVALID_HID : H5Oopen(f, obj, H5P_DEFAULT);
  if (o < 0) {
    fprintf(stderr, "h5attr: %s: cannot open %s for writing\n", path, obj);
    if (f >= 0) H5Fclose(f);
    return 1;
  }
  int ok = H5Aexists(o, name) <= 0 || H5Adelete(o, name) >= 0;
  hid_t ty = H5I_INVALID_HID, sp = H5Screate(H5S_SCALAR), a = H5I_INVALID_HID;
  const void *buf = NULL;
  if (!strcmp(type, "string")) {
    ty = H5Tcopy(H5T_C_S1);
    if (ty >= 0 && H5Tset_size(ty, strlen(val) + 1) < 0) ok = 0;
    buf = val;
  } else if (!strcmp(type, "int")) {
    ty = H5Tcopy(H5T_NATIVE_LONG);
    buf = &iv;
  } else {
    ty = H5Tcopy(H5T_NATIVE_DOUBLE);
    buf = &dv;
  }
  if (ok && ty >= 0 && sp >= 0) a = H5Acreate2(o, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT);
  ok = ok && a >= 0 && H5Awrite(a, ty, buf) >= 0;
  if (a >= 0 && H5Aclose(a) < 0) ok = 0;
  if (sp >= 0) H5Sclose(sp);
  if (ty >= 0) H5Tclose(ty);
  H5Oclose(o);
  if (H5Fclose(f) < 0) ok = 0;
  if (!ok) {
    fprintf(stderr, "h5attr: %s: cannot write attribute %s of %s\n", path, name, obj);
    return 1;
  }
  return 0;
}
