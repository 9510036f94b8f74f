"""Vocabulary of the generated (synthetic) WebShop catalogue: product types, attributes, options.

Everything here is invented for the generator in :mod:`empo2.envs.webshop.catalogue`; it only
imitates the shape of the scraped Amazon data (categories, breadcrumbs, attribute phrases,
option groups, price levels). Attribute entries are either an adjective phrase (``"sulfate
free"``: "a sulfate free shampoo") or a phrase with the attribute in brackets (``"for [dry
hair]"``: attribute "dry hair", said as "for dry hair").

Instruction openers and their relative frequencies were counted on the 12,087 human goals of
WebShop's ``baseline_models/data/human_goals.json`` (MIT): "i am looking for" 3,224, "im
looking for" 1,831, "i would like" 1,486, "i need" 1,856, "i want" 1,811, then "find me",
"id like", "get me", "can you find", "help me find", "buy me", "show me" with tens each.
"""

from __future__ import annotations

from dataclasses import dataclass

OPENERS: tuple[tuple[str, int], ...] = (
    ("i am looking for", 3224), ("im looking for", 1831), ("i need", 1856), ("i want", 1811),
    ("i would like", 1486), ("i am interested in", 237), ("id like", 101), ("find me", 105),
    ("get me", 81), ("can you find", 42), ("i am searching for", 44), ("help me find", 17),
    ("buy me", 44), ("show me", 26), ("looking for", 127),
)
# How option values are said in human instructions ("in the color redwood", "size 9 in white").
OPTION_PHRASES: dict[str, tuple[str, ...]] = {
    "color": ("in {v} color", "in the color {v}", "in {v}", "{v} color"),
    "size": ("in size {v}", "in {v} size", "size {v}", "of size {v}"),
    "flavor name": ("in {v} flavor", "{v} flavor", "with {v} flavor"),
    "scent": ("with {v} scent", "in {v} scent", "{v} scented"),
    "style": ("in {v} style", "{v} style", "style {v}"),
    "capacity": ("with {v} capacity", "{v}", "in {v}"),
    "length": ("{v} long", "in {v} length", "{v}"),
    "item package quantity": ("{v}", "in a {v}", "{v} please"),
    "material": ("made of {v}", "in {v}", "{v} material"),
}
CONNECTORS_ADJ = ("that is {a}", "which is {a}", "that is also {a}", "and it should be {a}")

BRAND_HEADS = ("Lu", "Ver", "Nor", "Zen", "Ari", "Bel", "Cor", "Dal", "Fen", "Gal", "Hal", "Ivo", "Jun",
               "Kel", "Lor", "Mar", "Nov", "Oro", "Pax", "Quin", "Ros", "Sol", "Tal", "Ul", "Vel", "Wyn",
               "Xan", "Yor", "Zef", "Bri", "Cal", "Dex", "Eco", "Flo", "Gra", "Hex")
BRAND_TAILS = ("mora", "vita", "nix", "ly", "tek", "ora", "ique", "well", "co", "on", "ara", "ex", "ino",
               "ster", "elle", "mark", "ford", "lab", "ify", "ant", "aro", "ene", "ix", "ova")

_FLOZ = ("2 fl oz", "4 fl oz", "6.8 fl oz", "8 fl oz", "12 fl oz", "16 fl oz", "33.8 fl oz")
_OUNCE = ("3 ounce (pack of 1)", "5.3 ounce (pack of 2)", "8 ounce (pack of 3)", "12 ounce (pack of 6)",
          "16 ounce (pack of 1)", "1.5 pound (pack of 1)", "2 pound (pack of 2)")
_COUNT = ("30 count", "60 count", "90 count", "120 count", "180 count")
_APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
_SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "8 wide", "10 wide")
_WAIST = ("28w x 30l", "30w x 30l", "32w x 32l", "34w x 32l", "36w x 34l", "38w x 34l")
_COLORS_APPAREL = ("Black", "White", "Navy Blue", "Heather Gray", "Charcoal", "Burgundy", "Olive Green",
                   "Khaki", "Dark Brown", "Beige", "Wine Red", "Sky Blue", "Hot Pink", "Black/White",
                   "Navy/White", "Light Grey", "Forest Green", "Mustard", "Coral", "Lavender")
_COLORS_TECH = ("Black", "White", "Silver", "Space Gray", "Rose Gold", "Midnight Blue", "Red", "Clear",
                "Matte Black", "Graphite", "Mint Green")
_COLORS_HOME = ("White", "Black", "Gray", "Light Grey", "Beige", "Navy Blue", "Walnut", "Espresso",
                "Natural", "Teal", "Cream", "Charcoal", "Sage Green", "Ivory", "Taupe", "Rustic Brown")
_COLORS_BEAUTY = ("Nude", "Coral", "Berry Red", "Plum", "Mauve", "Peach", "Rose", "Cherry Red",
                  "Light Beige", "Natural Tan", "Warm Ivory", "Espresso", "Caramel")
_SCENTS = ("Lavender", "Unscented", "Eucalyptus", "Tea Tree", "Vanilla", "Citrus", "Coconut", "Rose",
           "Ocean Breeze", "Jasmine", "Fresh Mint", "Lemon")
_FLAVORS_SNACK = ("Original", "Sea Salt", "Barbecue", "Sour Cream and Onion", "Cheddar", "Honey Roasted",
                  "Spicy Chili", "Variety Pack", "Salt and Vinegar", "Jalapeno")
_FLAVORS_SWEET = ("Chocolate", "Dark Chocolate", "Vanilla", "Strawberry", "Peanut Butter", "Caramel",
                  "Mixed Berry", "Cinnamon", "Mango", "Raspberry", "Coconut", "Lemon")
_FLAVORS_DRINK = ("Original", "Decaf", "French Roast", "Hazelnut", "Mocha", "Caramel", "Green Tea",
                  "Earl Grey", "Chai", "Chamomile", "Ginger Lemon", "Vanilla")
_CAPACITY = ("32GB", "64GB", "128GB", "256GB", "512GB", "1TB", "2TB")
_CABLE_LENGTH = ("3.3 feet", "6 feet", "10 feet", "1 meter", "2 meters", "15 feet")
_SCREEN = ("32 inch", "43 inch", "50 inch", "55 inch", "65 inch", "75 inch")
_BED = ("Twin", "Twin XL", "Full", "Queen", "King", "California King")
_PILLOW = ("16x16 inch", "18x18 inch", "20x20 inch", "22x22 inch", "24x24 inch", "12x20 inch")
_RUG = ("2 x 3 ft", "4 x 6 ft", "5 x 7 ft", "6 x 9 ft", "8 x 10 ft", "2.6 x 8 ft runner")
_SET = ("set of 2", "set of 4", "set of 6", "single")
_WOOD = ("Oak", "Walnut", "Pine", "Bamboo", "Acacia", "Metal", "Particle Board")
_STYLE_TECH = ("Basic", "With Charger", "Bundle", "Pro", "Lite", "With Case")


@dataclass(frozen=True)
class ProductType:
    """One kind of product of the generated catalogue.

    Attributes:
        category: coarse category (the original's ``category`` field).
        noun: what the product is called in instructions ("shampoo"); ``plural`` nouns take no
            article ("i need running socks").
        title_noun: the Title Case noun used in titles.
        query: the scrape query (the original's ``query`` field; decides the type reward).
        breadcrumb: ``product_category`` parts (joined with " › ").
        attributes: attribute phrases (see the module docstring).
        descriptors: Title Case words that make titles differ (materials, variants).
        options: ``(option name, value pool)`` groups a product may offer, in display order.
        price: (low, high) dollars.
        plural: the noun is plural.
    """

    category: str
    noun: str
    title_noun: str
    query: str
    breadcrumb: tuple[str, ...]
    attributes: tuple[str, ...]
    descriptors: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]
    plural: bool = False


def _t(category, noun, title_noun, query, breadcrumb, attributes, descriptors, options, price, plural=False):
    return ProductType(category, noun, title_noun, query, tuple(breadcrumb.split(" › ")),
                       tuple(attributes), tuple(descriptors), tuple(options), price, plural)


BEAUTY = "Beauty & Personal Care"
GROCERY = "Grocery & Gourmet Food"
CLOTHING = "Clothing, Shoes & Jewelry"
ELEC = "Electronics"
HOME = "Home & Kitchen"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # ---- beauty
    _t("beauty", "shampoo", "Shampoo", "shampoo", f"{BEAUTY} › Hair Care › Shampoo & Conditioner › Shampoos",
       ["sulfate free", "paraben free", "for [dry hair]", "for [color treated hair]", "made with [natural ingredients]",
        "cruelty free", "for [hair growth]", "with [argan oil]"],
       ["Argan Oil", "Tea Tree", "Biotin", "Keratin", "Rosemary Mint", "Coconut Milk"],
       [("size", _FLOZ), ("scent", _SCENTS)], (6, 38)),
    _t("beauty", "face moisturizer", "Face Moisturizer", "face moisturizer",
       f"{BEAUTY} › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
       ["for [sensitive skin]", "fragrance free", "with [hyaluronic acid]", "non greasy", "oil free",
        "for [fine lines]", "dermatologist tested", "with [spf 30]"],
       ["Daily", "Night", "Vitamin C", "Retinol", "Ceramide", "Aloe"],
       [("size", ("1 fl oz", "1.7 fl oz", "2.5 fl oz", "3.4 fl oz"))], (9, 60)),
    _t("beauty", "lipstick", "Lipstick", "lipstick", f"{BEAUTY} › Makeup › Lips › Lipstick",
       ["long lasting", "with a [matte finish]", "cruelty free", "paraben free", "highly pigmented", "moisturizing",
        "vegan", "smudge proof"],
       ["Velvet", "Satin", "Liquid", "Cream", "Sheer"],
       [("color", _COLORS_BEAUTY), ("item package quantity", ("1", "2", "3"))], (5, 28)),
    _t("beauty", "hair extensions", "Hair Extensions", "hair extensions",
       f"{BEAUTY} › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
       ["clip in", "natural looking", "heat resistant", "made of [human hair]", "easy to apply",
        "for [thin hair]", "tangle free"],
       ["Straight", "Wavy", "Curly", "Seamless", "Balayage"],
       [("color", ("Jet Black", "Dark Brown", "Medium Brown", "Ash Blonde", "Honey Blonde", "Platinum Blonde")),
        ("length", ("14 inch", "16 inch", "18 inch", "20 inch", "22 inch"))], (19, 120), plural=True),
    _t("beauty", "body wash", "Body Wash", "body wash", f"{BEAUTY} › Skin Care › Body › Cleansers › Body Washes",
       ["for [sensitive skin]", "plant based", "sulfate free", "hypoallergenic", "with [shea butter]",
        "dermatologist tested", "moisturizing"],
       ["Oatmeal", "Charcoal", "Aloe", "Honey", "Shea Butter", "Sport"],
       [("scent", _SCENTS), ("size", ("12 fl oz", "16 fl oz", "22 fl oz", "33.8 fl oz"))], (5, 24)),
    _t("beauty", "nail polish", "Nail Polish", "nail polish", f"{BEAUTY} › Makeup › Nails › Nail Polish",
       ["quick dry", "long lasting", "non toxic", "chip resistant", "vegan", "high gloss"],
       ["Gel", "Glitter", "Matte", "Classic", "Pastel"],
       [("color", _COLORS_BEAUTY + ("Clear", "Black", "White"))], (4, 19)),
    _t("beauty", "electric toothbrush", "Electric Toothbrush", "electric toothbrush",
       f"{BEAUTY} › Oral Care › Toothbrushes & Accessories › Electric Toothbrushes",
       ["rechargeable", "with [travel case]", "for [sensitive teeth]", "with [2 minute timer]", "waterproof",
        "with [long battery life]"],
       ["Sonic", "Rotating", "Whitening", "Kids", "Smart"],
       [("color", ("Black", "White", "Pink", "Blue", "Mint Green")), ("style", ("With 2 Brush Heads", "With 4 Brush Heads", "Handle Only"))],
       (19, 150)),
    _t("beauty", "eye shadow palette", "Eyeshadow Palette", "eyeshadow palette",
       f"{BEAUTY} › Makeup › Eyes › Eyeshadow", ["highly pigmented", "long lasting", "cruelty free",
       "blendable", "with [mirror]", "shimmer and matte"],
       ["Nude", "Smoky", "Sunset", "Rose Gold", "Neutral"], [], (8, 45)),
    # ---- food
    _t("food", "potato chips", "Potato Chips", "potato chips", f"{GROCERY} › Snack Foods › Chips & Crisps › Potato Chips",
       ["gluten free", "non gmo", "kettle cooked", "low sodium", "vegan", "no artificial flavors"],
       ["Kettle", "Thin & Crispy", "Ridged", "Baked", "Avocado Oil"],
       [("flavor name", _FLAVORS_SNACK), ("size", ("1 ounce (pack of 24)", "5 ounce (pack of 4)", "8 ounce (pack of 1)", "2 ounce (pack of 12)"))],
       (3, 30), plural=True),
    _t("food", "protein bar", "Protein Bars", "protein bars", f"{GROCERY} › Snack Foods › Bars › Protein Bars",
       ["gluten free", "high protein", "low sugar", "keto friendly", "non gmo", "plant based", "soy free"],
       ["Crunchy", "Chewy", "Whey", "Plant Protein", "Nut Butter"],
       [("flavor name", _FLAVORS_SWEET), ("size", ("pack of 4", "pack of 12", "pack of 15"))], (9, 40)),
    _t("food", "ground coffee", "Ground Coffee", "ground coffee", f"{GROCERY} › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
       ["fair trade", "usda organic", "medium roast", "dark roast", "low acid", "kosher"],
       ["Colombian", "Ethiopian", "Breakfast Blend", "House Blend", "Espresso Roast"],
       [("flavor name", _FLAVORS_DRINK), ("size", _OUNCE)], (7, 35)),
    _t("food", "herbal tea", "Herbal Tea", "herbal tea", f"{GROCERY} › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
       ["caffeine free", "usda organic", "non gmo", "individually wrapped", "gluten free", "kosher"],
       ["Sleepy Time", "Detox", "Immune", "Calming", "Wellness"],
       [("flavor name", _FLAVORS_DRINK), ("size", ("20 count (pack of 1)", "20 count (pack of 6)", "40 count (pack of 2)"))],
       (4, 28)),
    _t("food", "beef jerky", "Beef Jerky", "beef jerky", f"{GROCERY} › Snack Foods › Jerky & Dried Meats › Beef Jerky",
       ["high protein", "gluten free", "low fat", "grass fed", "with [no added nitrates]", "keto friendly"],
       ["Original", "Teriyaki", "Peppered", "Smoked", "Sweet and Hot"],
       [("flavor name", ("Original", "Teriyaki", "Black Pepper", "Sweet and Spicy", "Barbecue")), ("size", _OUNCE)],
       (6, 45)),
    _t("food", "olive oil", "Extra Virgin Olive Oil", "olive oil", f"{GROCERY} › Pantry Staples › Cooking Oils › Olive Oil",
       ["cold pressed", "usda organic", "non gmo", "first cold pressed", "kosher", "single origin"],
       ["Italian", "Greek", "Spanish", "California", "Early Harvest"],
       [("size", ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "50.7 fl oz", "101 fl oz"))], (8, 48)),
    _t("food", "dark chocolate", "Dark Chocolate Bar", "dark chocolate", f"{GROCERY} › Candy & Chocolate › Chocolate Bars",
       ["fair trade", "vegan", "dairy free", "low sugar", "non gmo", "individually wrapped"],
       ["70% Cacao", "85% Cacao", "Sea Salt", "Almond", "Orange"],
       [("size", ("pack of 1", "pack of 6", "pack of 12")), ("flavor name", ("Sea Salt", "Almond", "Mint", "Raspberry", "Espresso"))],
       (4, 36)),
    _t("food", "vitamin gummies", "Vitamin Gummies", "vitamin gummies", f"{GROCERY} › Vitamins & Supplements › Multivitamins",
       ["gluten free", "vegan", "sugar free", "non gmo", "gelatin free", "for [adults]"],
       ["Multivitamin", "Vitamin D3", "Elderberry", "Biotin", "Probiotic"],
       [("size", _COUNT), ("flavor name", ("Mixed Berry", "Orange", "Strawberry", "Lemon", "Cherry"))], (9, 40), plural=True),
    _t("food", "granola", "Granola", "granola", f"{GROCERY} › Breakfast Foods › Cereals › Granola",
       ["gluten free", "whole grain", "high fiber", "no artificial flavors", "non gmo", "low sugar"],
       ["Honey Almond", "Maple Pecan", "Cranberry", "Ancient Grain", "Coconut Cashew"],
       [("size", ("11 ounce (pack of 1)", "11 ounce (pack of 4)", "24 ounce (pack of 2)"))], (4, 30)),
    # ---- fashion
    _t("fashion", "t-shirt", "T-Shirt", "mens t-shirts", f"{CLOTHING} › Men › Clothing › Shirts › T-Shirts",
       ["short sleeve", "machine wash", "moisture wicking", "with a [regular fit]", "made of [cotton]", "crew neck",
        "with a [relaxed fit]"],
       ["Classic", "Performance", "Graphic", "Pocket", "Heavyweight"],
       [("color", _COLORS_APPAREL), ("size", _APPAREL_SIZES)], (8, 35)),
    _t("fashion", "sweatpants", "Sweatpants", "womens sweatpants", f"{CLOTHING} › Women › Clothing › Active › Active Pants",
       ["high waist", "with [pockets]", "machine wash", "with a [relaxed fit]", "with an [elastic waistband]",
        "with a [drawstring closure]"],
       ["Jogger", "Fleece", "Wide Leg", "Lounge", "Yoga"],
       [("color", _COLORS_APPAREL), ("size", _APPAREL_SIZES)], (15, 45), plural=True),
    _t("fashion", "running shoes", "Running Shoes", "mens running shoes", f"{CLOTHING} › Men › Shoes › Athletic › Running",
       ["with a [rubber sole]", "lightweight", "made of [breathable mesh]", "non slip", "with [arch support]",
        "with [memory foam]"],
       ["Trail", "Road", "Cushioned", "Knit", "Racing"],
       [("color", _COLORS_APPAREL), ("size", _SHOE_SIZES)], (35, 130), plural=True),
    _t("fashion", "crew socks", "Crew Socks", "mens crew socks", f"{CLOTHING} › Men › Clothing › Socks › Casual",
       ["machine washable", "moisture wicking", "with a [cushioned sole]", "made of [cotton]", "with [arch support]",
        "odor resistant"],
       ["Athletic", "Dress", "Wool Blend", "Bamboo", "Compression"],
       [("color", ("Black", "White", "Gray", "Navy/White", "Assorted")), ("size", ("medium", "large", "x-large")),
        ("item package quantity", ("6 pairs", "10 pairs", "12 pairs"))], (9, 30), plural=True),
    _t("fashion", "hoodie", "Hoodie", "womens hoodie", f"{CLOTHING} › Women › Clothing › Fashion Hoodies & Sweatshirts",
       ["long sleeve", "with [pockets]", "machine wash", "with an [oversized fit]", "fleece lined",
        "with a [drawstring hood]"],
       ["Pullover", "Zip Up", "Cropped", "Sherpa", "Vintage"],
       [("color", _COLORS_APPAREL), ("size", _APPAREL_SIZES)], (19, 55)),
    _t("fashion", "jeans", "Jeans", "mens jeans", f"{CLOTHING} › Men › Clothing › Jeans",
       ["with a [relaxed fit]", "with a [button closure]", "made of [stretch denim]", "machine wash", "straight leg",
        "with a [slim fit]"],
       ["Classic", "Vintage Wash", "Carpenter", "Athletic", "Bootcut"],
       [("color", ("Dark Indigo", "Medium Blue", "Light Blue", "Black", "Rinse")), ("size", _WAIST)], (25, 79), plural=True),
    _t("fashion", "sandals", "Sandals", "womens sandals", f"{CLOTHING} › Women › Shoes › Sandals",
       ["with a [rubber sole]", "with [arch support]", "open toe", "with an [adjustable strap]", "non slip",
        "with [memory foam]"],
       ["Slide", "Platform", "Wedge", "Flip Flop", "Strappy"],
       [("color", ("Black", "White", "Beige", "Brown", "Gold", "Silver")), ("size", _SHOE_SIZES[:10])], (15, 60), plural=True),
    _t("fashion", "baseball cap", "Baseball Cap", "baseball cap", f"{CLOTHING} › Men › Accessories › Hats & Caps › Baseball Caps",
       ["with an [adjustable strap]", "made of [cotton]", "breathable", "low profile", "unisex",
        "with [uv protection]"],
       ["Classic", "Distressed", "Trucker", "Dad Hat", "Mesh"],
       [("color", _COLORS_APPAREL)], (9, 29)),
    # ---- electronics
    _t("electronics", "wireless earbuds", "Wireless Earbuds", "wireless earbuds",
       f"{ELEC} › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
       ["noise cancelling", "with [long battery life]", "with [charging case]", "water resistant", "with [bluetooth 5.3]",
        "with [built-in microphone]", "fast charging"],
       ["True Wireless", "Sport", "Hybrid", "Bass Boost", "Compact"],
       [("color", _COLORS_TECH[:7]), ("style", _STYLE_TECH[:3])], (19, 150), plural=True),
    _t("electronics", "usb c cable", "USB C Cable", "usb c cable", f"{ELEC} › Computers & Accessories › Cables & Accessories › USB Cables",
       ["fast charging", "made of [braided nylon]", "high speed", "durable", "with [100w power delivery]",
        "for [data transfer]"],
       ["Braided", "Right Angle", "Coiled", "Magnetic", "Flat"],
       [("length", _CABLE_LENGTH), ("color", _COLORS_TECH[:4]), ("item package quantity", ("1 pack", "2 pack", "3 pack"))],
       (6, 25)),
    _t("electronics", "memory card", "microSD Memory Card", "micro sd card", f"{ELEC} › Computers & Accessories › Memory Cards › Micro SD Cards",
       ["high speed", "with [adapter]", "for [4k video]", "waterproof", "shockproof"],
       ["Extreme", "Ultra", "Endurance", "Pro Plus", "Select"],
       [("capacity", _CAPACITY[:6])], (7, 120)),
    _t("electronics", "smart tv", "Smart TV", "smart tv", f"{ELEC} › Television & Video › Televisions › LED & LCD TVs",
       ["4k ultra hd", "with [hdr]", "with [voice remote]", "wall mountable", "with [dolby vision]",
        "with a [high refresh rate]"],
       ["QLED", "LED", "OLED", "Crystal", "Neo"],
       [("size", _SCREEN)], (180, 1600)),
    _t("electronics", "portable charger", "Portable Charger", "portable charger", f"{ELEC} › Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
       ["fast charging", "high capacity", "usb c", "compact", "with [led display]", "with [wireless charging]"],
       ["10000mAh", "20000mAh", "Slim", "Solar", "Magnetic"],
       [("color", _COLORS_TECH[:5]), ("capacity", ("10000mah", "20000mah", "26800mah"))], (15, 70)),
    _t("electronics", "bluetooth speaker", "Bluetooth Speaker", "bluetooth speaker", f"{ELEC} › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
       ["waterproof", "with [long battery life]", "with [deep bass]", "portable", "with [built-in microphone]",
        "with [stereo pairing]"],
       ["Outdoor", "Mini", "Party", "Rugged", "360 Degree"],
       [("color", _COLORS_TECH)], (19, 180)),
    _t("electronics", "hdmi cable", "HDMI Cable", "hdmi cable", f"{ELEC} › Television & Video › Accessories › Cables › HDMI Cables",
       ["high speed", "4k hdr", "gold plated", "braided", "supports [ethernet]", "8k capable"],
       ["Ultra High Speed", "Premium", "Slim", "Flexible", "Certified"],
       [("length", _CABLE_LENGTH), ("item package quantity", ("1 pack", "2 pack", "5 pack"))], (6, 30)),
    _t("electronics", "wireless mouse", "Wireless Mouse", "wireless mouse", f"{ELEC} › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Mice",
       ["ergonomic", "silent click", "rechargeable", "with [long battery life]", "bluetooth", "with [adjustable dpi]"],
       ["Ergonomic", "Vertical", "Travel", "Gaming", "Slim"],
       [("color", _COLORS_TECH[:6])], (9, 60)),
    # ---- furniture / home
    _t("furniture", "throw pillow cover", "Throw Pillow Covers", "throw pillow covers", f"{HOME} › Home Décor Products › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
       ["for [living room]", "machine washable", "with a [hidden zipper]", "super soft", "double sided", "hand painted"],
       ["Velvet", "Linen", "Boho", "Farmhouse", "Faux Fur"],
       [("color", _COLORS_HOME), ("size", _PILLOW)], (9, 35)),
    _t("furniture", "area rug", "Area Rug", "area rug", f"{HOME} › Home Décor Products › Area Rugs, Runners & Pads › Area Rugs",
       ["for [living room]", "non slip", "easy clean", "low pile", "stain resistant", "machine washable"],
       ["Modern", "Vintage", "Moroccan", "Geometric", "Shag"],
       [("color", _COLORS_HOME), ("size", _RUG)], (29, 260)),
    _t("furniture", "bed sheet set", "Bed Sheet Set", "bed sheets", f"{HOME} › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
       ["deep pocket", "breathable", "wrinkle free", "machine washable", "made of [microfiber]", "hypoallergenic"],
       ["Bamboo", "Egyptian Cotton", "Microfiber", "Percale", "Linen"],
       [("color", _COLORS_HOME), ("size", _BED)], (22, 120)),
    _t("furniture", "bookshelf", "Bookshelf", "bookshelf", f"{HOME} › Furniture › Living Room Furniture › Bookcases",
       ["with [easy assembly]", "for [living room]", "space saving", "sturdy", "with [storage]", "wall mounted"],
       ["5 Tier", "Ladder", "Industrial", "Corner", "Cube"],
       [("color", _COLORS_HOME[:10]), ("material", _WOOD)], (39, 240)),
    _t("furniture", "office chair", "Office Chair", "office chair", f"{HOME} › Furniture › Home Office Furniture › Home Office Chairs",
       ["with [lumbar support]", "height adjustable", "with [armrests]", "swivel", "made of [breathable mesh]",
        "with [easy assembly]"],
       ["Ergonomic", "High Back", "Mid Back", "Executive", "Task"],
       [("color", ("Black", "Gray", "White", "Blue", "Pink"))], (59, 350)),
    _t("furniture", "storage bins", "Storage Bins", "storage bins", f"{HOME} › Storage & Organization › Baskets, Bins & Containers › Storage Bins",
       ["collapsible", "easy to clean", "with [handles]", "for [closet]", "stackable", "with [lids]"],
       ["Fabric", "Cube", "Woven", "Clear Plastic", "Canvas"],
       [("color", _COLORS_HOME[:8]), ("size", ("set of 2", "set of 3", "set of 4", "set of 6"))], (12, 55), plural=True),
    _t("furniture", "scented candle", "Scented Candle", "scented candle", f"{HOME} › Home Décor Products › Candles & Holders › Candles › Jar Candles",
       ["lead free", "long burning", "made of [soy wax]", "hand poured", "non toxic", "for [home]"],
       ["Jar", "3 Wick", "Travel Tin", "Aromatherapy", "Luxury"],
       [("scent", _SCENTS), ("size", ("4 oz", "8 oz", "14 oz", "22 oz"))], (9, 45)),
    _t("furniture", "shower curtain", "Shower Curtain", "shower curtain", f"{HOME} › Bath › Shower Curtains, Hooks & Liners › Shower Curtains",
       ["waterproof", "with [hooks]", "machine washable", "mildew resistant", "heavy duty", "quick drying"],
       ["Fabric", "Waffle Weave", "Botanical", "Striped", "Linen Blend"],
       [("color", _COLORS_HOME), ("size", ("72w x 72h", "72w x 78h", "54w x 78h", "36w x 72h"))], (12, 45)),
)
