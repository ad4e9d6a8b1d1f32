/* Model files that describe themselves (model_final.h5, model_best.h5 and
 * checkpoints): beside the tensors, attributes on the file's root say which
 * model they hold and everything needed to make it again:
 *   model             the model's name (-model)
 *   option.NAME       each option the model's options op read (-mlp_hidden,
 *                     -gpt_layers, a user model's own ...), its value as a
 *                     string; option.NAME.shapes is 1 for one that shapes
 *                     the parameters (the rest, dropout, only its training)
 *   data.shape        the sample's shape (int64 array, without N)
 *   data.nclasses, data.tokens, data.ntargets   (int64): the data's kind
 *   precision         "fp32" or "fp64"
 * so a later run (-init_from, -mode evaluate|predict|generate -model_file)
 * rebuilds the model from the file alone, and PyTorch
 * (validation/load_mpitrain.py) reads the architecture from the same place.
 * A file written before these attributes existed has none: the options of
 * the command line make the model then, as they always did. */
#ifndef MT_MODELFILE_H
#define MT_MODELFILE_H

#include "core/core.h"

#include <hdf5.h>

/* Writes m's description as attributes of loc (an open file or group).
 * The option values are those the model's options op read in this run
 * (mt_model_read_options). */
int mt_model_desc_write(hid_t loc, const mt_model *m);

/* Before the model's options are read: the description in path (the
 * value of option, "-init_from" or "-model_file", which errors name) sets
 * -model and each of the model's options the user did not give, in the
 * PETSc options database, so reading them afterwards gives the file's
 * model. A file without a description changes nothing. An unreadable file
 * or one that is not a model is MT_ERR_FILE / MT_ERR_DATA naming it.
 * Collective over comm only in that every rank reads the same file. */
int mt_model_file_options(const char *path, const char *option);

/* After the options are read: every option the user gave that shapes the
 * model and contradicts the file (-model cnn for an mlp's file,
 * -mlp_hidden 64 for one of 128) is refused, MT_ERR_OPTION, naming the
 * option, its value, the file and the file's value. */
int mt_model_file_check(const char *path, const char *option);

/* The data description the model in path was made for; *found 0 (and
 * spec untouched) for a file without one. */
int mt_model_file_spec(const char *path, const char *option, mt_data_spec *spec, int *found);

/* The data set data (given by data_option, its spec have) against the
 * data the model in path was made for: MT_ERR_DATA naming both options,
 * both files and both shapes (kinds, classes) when they differ; 0 when
 * they agree or the file has no description. */
int mt_model_file_spec_check(const char *path, const char *option, const mt_data_spec *have,
                             const char *data_option, const char *data);

#endif
