// The device file's keys as one table: each key's parser, formatter, default
// and help. ParseDeviceFile and FormatDeviceFile walk it, droce-ctl prints
// it (`droce-ctl settings`), and doc/verbs.md's key table is generated from
// it (a test compares the two). A key's default is what a DeviceFile holds
// before any key is read (the member initializers of DeviceFile,
// ProgressConfig and VerbsDeviceConfig), written nowhere else.
#ifndef DROCE_DRIVERS_VERBS_DEVICE_SETTINGS_H_
#define DROCE_DRIVERS_VERBS_DEVICE_SETTINGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "drivers/verbs/device_config.h"

namespace droce::verbs {

struct DeviceSetting {
  const char* key;
  // Sets the key's value in f; an error names the key and what it takes.
  std::function<absl::Status(absl::string_view value, DeviceFile& f)> parse;
  // The key's values in f, one line each; none: the key is left out (unset).
  std::function<std::vector<std::string>(const DeviceFile& f)> format;
  // What leaving the key out means, for a key a default file leaves out;
  // empty for a key whose default is a value.
  const char* unset;
  const char* help;
};

// A named set of progress-thread knobs (progress_profile=NAME): the way a
// user picks the thread's policy. Each starts from ProgressConfig's defaults
// (balanced) and changes what its use needs; knobs after it in the file
// still override it.
struct ProgressProfile {
  const char* name;
  const char* use;  // what it is for, and what it changes
  void (*apply)(ProgressConfig& p);
};
const std::vector<ProgressProfile>& ProgressProfiles();
// The profiles as doc/verbs.md holds them: each knob a profile changes, with
// its value in every profile.
std::string ProgressProfilesMarkdown();

// Every key, in the order FormatDeviceFile writes them.
const std::vector<DeviceSetting>& DeviceSettings();
const DeviceSetting* FindDeviceSetting(absl::string_view key);
// The key's default: its value in a default DeviceFile, else its unset text.
std::string DeviceSettingDefault(const DeviceSetting& s);
// The table as doc/verbs.md holds it (key, default, help; Markdown).
std::string DeviceSettingsMarkdown();
// The table as `droce-ctl settings` prints it.
std::string DeviceSettingsText();

}  // namespace droce::verbs

#endif  // DROCE_DRIVERS_VERBS_DEVICE_SETTINGS_H_
