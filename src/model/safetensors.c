/* placeholder until the reader lands */
#include "model/safetensors.h"
