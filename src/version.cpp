#include "relpos/version.hpp"

const char* relpos::version() { return RELPOS_VERSION_STRING; }
