/* The baseline: the same program and flash driver with no file system (a page programmed and
 * read back), so that `size` of a probe minus this one is the file system's code. */
#include <string.h>

#include "probe.h"
#include "ram_flash.h"

int probe_workload(ProbeRam *ram) {
    static unsigned char data[2048], spare[64];
    RamFlash flash;
    if (ram_flash_init(&flash, 4, 2048, 64, 2048, 64) != 0) return 1;
    FsocFlashDriver driver = ram_flash_driver(&flash);
    memset(data, 0x5A, sizeof data);
    if (driver.erase_block(driver.context, 0, 0) != 0 || driver.program_page(driver.context, 0, 0, 0, data, spare) != 0 ||
        driver.read_page(driver.context, 0, 0, 0, data, spare) != 0 || driver.is_bad_block(driver.context, 0, 0) != 0)
        return 1;
    ram->heap_peak_bytes = 0;
    ram->state_bytes = 0;
    ram_flash_free(&flash);
    return 0;
}
