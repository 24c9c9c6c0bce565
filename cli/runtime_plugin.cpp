// Loading the runtime plugin (cli/runtime_plugin.h) from the folder of this program.
#include "cli/runtime_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

#include "cli/common.h"
#include "schedules/error.h"

namespace stagecraft::cli {

namespace {

std::string program_dir() {
  const std::string path = program_path();
  return path.substr(0, path.find_last_of('/'));
}

const RuntimePluginApi& load() {
  const std::string path = program_dir() + "/stagecraft-runtime.so";
  // RTLD_LOCAL: the plugin's copies of the project's libraries stay its own; never closed, since
  // the commands it adds live in the app until exit.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error("cannot load the runtime plugin " + path + ": " + ::dlerror());
  using Entry = const RuntimePluginApi* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "stagecraft_runtime_plugin"));
  if (!entry) throw Error("the runtime plugin " + path + " lacks stagecraft_runtime_plugin: " + ::dlerror());
  const RuntimePluginApi* api = entry();
  if (!api || api->version != kRuntimePluginVersion)
    throw Error("the runtime plugin " + path + " is of another build (version " + std::to_string(api ? api->version : -1) +
                ", this program needs " + std::to_string(kRuntimePluginVersion) + "); rebuild both");
  return *api;
}

}  // namespace

const RuntimePluginApi& runtime_plugin() {
  static const RuntimePluginApi& api = load();
  return api;
}

}  // namespace stagecraft::cli
