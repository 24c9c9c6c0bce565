// The flags of a launch script or an argument list as a shell would pass them: line continuations
// joined, comments and quotes removed, simple variables ($X, ${X}, ${X[@]}, $((A*B))) expanded,
// each --flag with the words after it on the same logical line (up to the next flag, a program
// such as pretrain_gpt.py, or a closing parenthesis). Megatron-LM's and torchrun's flags both.
#pragma once

#include <string>
#include <vector>

namespace stagecraft::configs {

struct ShellFlag {
  std::string name;                 // as written, with its dashes: --num-layers, --nproc_per_node
  std::string key;                  // without the dashes, '_' as '-': num-layers, nproc-per-node
  std::vector<std::string> values;  // the words after it (--flag=value: the one value)
};

// Every flag in order of appearance; InputError naming `where` on an unterminated quote.
std::vector<ShellFlag> shell_flags(const std::string& text, const std::string& where);

}  // namespace stagecraft::configs
