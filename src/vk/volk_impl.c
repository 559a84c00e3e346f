/* volk's implementation, compiled inside relpos with its names renamed (cmake/VolkPrivate.cmake). */
#include <volk.c>
