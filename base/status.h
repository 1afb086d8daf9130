#pragma once
// Status and Result live in the installed client headers (a trainer's build sees
// them through gossip/client.h); the code base includes them from here.

#include "gossip/status.h"
