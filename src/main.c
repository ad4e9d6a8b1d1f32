/* mpitrain: the program is mt_main() in libmpitrain (src/trainer/app.c), so
 * that a user's executable can register its own models and backends first
 * (see examples/). */
#include "mpitrain/mpitrain.h"

int main(int argc, char **argv) { return mt_main(argc, argv); }
