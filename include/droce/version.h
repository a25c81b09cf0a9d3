// droce's public version, for programs and the verbs provider to report.
#ifndef DROCE_INCLUDE_DROCE_VERSION_H_
#define DROCE_INCLUDE_DROCE_VERSION_H_

#define DROCE_VERSION_MAJOR 0
#define DROCE_VERSION_MINOR 1
#define DROCE_VERSION_PATCH 0
#define DROCE_VERSION_STRING "0.1.0"

#endif  // DROCE_INCLUDE_DROCE_VERSION_H_
